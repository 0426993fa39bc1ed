//! Shared harness: a driver over the Fusion model, and an I/O workload that checks every
//! completion arrives exactly once, on the queue it was sent to, with the right data.

#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::Arc;

use devhal::DmaRegion;
use megasas_fusion::fake::{FakeConfig, FakeDelay, FakeFusion, FakeMmio};
use megasas_fusion::{Completion, Config, Controller, Error, Generation, IoOp, IoOutcome, IoRequest, Report, Segment};

pub type Ctrl = Controller<FakeMmio, FakeDelay>;

/// A one-block READ of block 0 of the model's LD into `sgl`.
pub fn read_block0(sgl: &[Segment]) -> IoRequest<'_> {
    IoRequest {
        system_pd: false,
        target: LD,
        op: IoOp::Read,
        lba: 0,
        blocks: 1,
        sgl,
    }
}

pub fn config(g: Generation, vectors: usize) -> Config {
    let mut c = Config::new(g, (0..vectors).collect());
    c.bringup_budget_us = 30_000_000;
    c.command_timeout_us = 500_000;
    c.state_timeout_us = 5_000_000;
    // As the kernel decides it for a card in its own generation's slot (an Aero at 16 GT/s);
    // the model's default matches.
    c.pcie_bw_limited = megasas_fusion::layout::pcie_bw_limited(g, Some(megasas_fusion::layout::LINK_16GT));
    c
}

pub fn bring_up(fc: FakeConfig, cfg: Config) -> (Arc<FakeFusion>, Result<Ctrl, Error>, Report) {
    let fake = FakeFusion::new(fc);
    let mut report = Report::new();
    let r = Controller::bring_up(fake.mmio(), &fake.dma(), fake.delay(), cfg, &mut report);
    (fake, r, report)
}

pub fn assert_clean(fake: &FakeFusion) {
    fake.audit();
    assert!(fake.violations().is_empty(), "violations: {:#?}", fake.violations());
    assert!(
        fake.dma_violations().is_empty(),
        "stray DMA: {:#?}",
        fake.dma_violations()
    );
}

/// Tiny deterministic RNG.
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[derive(Clone, Copy, Debug)]
pub struct InFlight {
    pub seq: u64,
    pub queue: u16,
    pub op: IoOp,
    pub lba: u64,
    pub blocks: u32,
    pub pattern: u8,
}

/// A workload over one controller: tag t owns LBAs [t*8, t*8+8) of LD 0 and buffer bytes
/// [t*BUF, (t+1)*BUF) of one DMA region.
pub struct Workload {
    pub fake: Arc<FakeFusion>,
    pub ctrl: Ctrl,
    pub buf: DmaRegion,
    pub inflight: HashMap<u32, InFlight>,
    /// Last pattern written to each block (by LBA).
    pub written: HashMap<u64, u8>,
    pub seq: u64,
    pub completed: u64,
    pub failed: u64,
    pub reset_returned: Vec<Completion>,
    /// FastPath requests the firmware refused for a stale RAID map (nothing moved).
    pub stale_returned: Vec<Completion>,
    pub rng: Rng,
    /// When set, mismatches are tolerated (mistake tests only look at the model's verdict).
    pub lenient: bool,
}

pub const BUF: usize = 4096;
pub const LD: u8 = 0;

impl Workload {
    pub fn new(fake: Arc<FakeFusion>, ctrl: Ctrl, seed: u64) -> Self {
        let tags = ctrl.limits().io_tags as usize;
        let buf = fake.memory().alloc_zeroed(tags * BUF, 4096).unwrap();
        Self {
            fake,
            ctrl,
            buf,
            inflight: HashMap::new(),
            written: HashMap::new(),
            seq: 0,
            completed: 0,
            failed: 0,
            reset_returned: Vec::new(),
            stale_returned: Vec::new(),
            rng: Rng(seed | 1),
            lenient: false,
        }
    }

    /// A copy of tag's buffer.
    pub fn buf_read(&self, tag: u32) -> Vec<u8> {
        let mut out = vec![0u8; BUF];
        // SAFETY: the region is alive as long as the model's memory, and tag's slice lies inside it.
        unsafe { std::ptr::copy_nonoverlapping(self.buf.virt.as_ptr().add(tag as usize * BUF), out.as_mut_ptr(), BUF) };
        out
    }

    /// Fills the first `len` bytes of tag's buffer.
    pub fn buf_fill(&mut self, tag: u32, len: usize, byte: u8) {
        assert!(len <= BUF);
        // SAFETY: as in `buf_read`; the test is single-threaded and the device is not using it.
        unsafe { std::ptr::write_bytes(self.buf.virt.as_ptr().add(tag as usize * BUF), byte, len) };
    }

    /// Splits `len` bytes of tag's buffer into `n` non-empty segments.
    pub fn segments(&mut self, tag: u32, len: usize, n: usize) -> Vec<Segment> {
        let n = n.min(len).max(1);
        let base = self.buf.phys + (tag as usize * BUF) as u64;
        let mut out = Vec::new();
        let mut off = 0usize;
        for i in 0..n {
            let remaining = len - off;
            let take = if i + 1 == n {
                remaining
            } else {
                (remaining / (n - i)).max(1)
            };
            out.push(Segment {
                phys: base + off as u64,
                len: take as u32,
            });
            off += take;
        }
        out
    }

    /// Submits one request on `tag` (must be idle). Returns the driver's verdict.
    pub fn submit(&mut self, tag: u32, queue: u16, op: IoOp, blocks: u32, nseg: usize) -> Result<(), Error> {
        let lba = u64::from(tag) * 8;
        let len = blocks as usize * 512;
        self.seq += 1;
        let pattern = (self.seq as u8).wrapping_mul(31).wrapping_add(7);
        self.buf_fill(tag, len, if op == IoOp::Write { pattern } else { 0xEE });
        let segs = self.segments(tag, len, nseg);
        let req = IoRequest {
            system_pd: false,
            target: LD,
            op,
            lba,
            blocks,
            sgl: &segs,
        };
        let cookie = (u64::from(tag) << 32) | (self.seq & 0xFFFF_FFFF);
        self.ctrl.submit(tag, queue, &req, cookie)?;
        self.inflight.insert(
            tag,
            InFlight {
                seq: self.seq,
                queue,
                op,
                lba,
                blocks,
                pattern,
            },
        );
        Ok(())
    }

    /// A write of `blocks` blocks at `lba` larger than one tag's buffer: its data spans the
    /// buffers of `tag` and the tags after it, which must not be in flight meanwhile.
    pub fn submit_large_write(&mut self, tag: u32, lba: u64, blocks: u32) -> Result<(), Error> {
        let len = blocks as usize * 512;
        assert!(tag as usize * BUF + len <= self.ctrl.limits().io_tags as usize * BUF);
        self.seq += 1;
        let pattern = (self.seq as u8).wrapping_mul(31).wrapping_add(7);
        // SAFETY: as in `buf_read`: the span lies inside the region, the device is not using it.
        unsafe { std::ptr::write_bytes(self.buf.virt.as_ptr().add(tag as usize * BUF), pattern, len) };
        let segs = [Segment {
            phys: self.buf.phys + (tag as usize * BUF) as u64,
            len: len as u32,
        }];
        let req = IoRequest {
            system_pd: false,
            target: LD,
            op: IoOp::Write,
            lba,
            blocks,
            sgl: &segs,
        };
        let cookie = (u64::from(tag) << 32) | (self.seq & 0xFFFF_FFFF);
        self.ctrl.submit(tag, 0, &req, cookie)?;
        self.inflight.insert(
            tag,
            InFlight {
                seq: self.seq,
                queue: 0,
                op: IoOp::Write,
                lba,
                blocks,
                pattern,
            },
        );
        Ok(())
    }

    fn accept(&mut self, c: Completion, queue: Option<u16>) {
        let Some(f) = self.inflight.remove(&c.tag) else {
            assert!(self.lenient, "completion for tag {} not in flight: {c:?}", c.tag);
            return;
        };
        if self.lenient {
            return;
        }
        assert_eq!(
            c.cookie,
            (u64::from(c.tag) << 32) | (f.seq & 0xFFFF_FFFF),
            "wrong cookie"
        );
        if let Some(q) = queue {
            // Balanced mode may send a request to a high-IOPS queue instead.
            assert!(
                q == f.queue || q < self.ctrl.high_iops_queues(),
                "tag {} completed on queue {q}, sent to {}",
                c.tag,
                f.queue
            );
        }
        match c.outcome {
            IoOutcome::Ok => {
                self.completed += 1;
                match f.op {
                    IoOp::Write => {
                        for b in 0..u64::from(f.blocks) {
                            self.written.insert(f.lba + b, f.pattern);
                        }
                    }
                    IoOp::Read => {
                        let got = self.buf_read(c.tag);
                        for b in 0..f.blocks as usize {
                            let want = self.written.get(&(f.lba + b as u64)).copied().unwrap_or(0);
                            let blk = &got[b * 512..(b + 1) * 512];
                            assert!(
                                blk.iter().all(|&x| x == want),
                                "tag {} block {b} read {:x?}.., want {want:#x}",
                                c.tag,
                                &blk[..8]
                            );
                        }
                    }
                    IoOp::Flush => {}
                }
            }
            IoOutcome::Failed(_) => self.failed += 1,
            IoOutcome::StaleMap => self.stale_returned.push(c),
            IoOutcome::Reset => {
                self.reset_returned.push(c);
                // A write dropped by a reset may or may not have reached the disk.
                if f.op == IoOp::Write {
                    for b in 0..u64::from(f.blocks) {
                        let now = self.fake.ld_bytes(LD, ((f.lba + b) * 512) as usize, 1)[0];
                        self.written.insert(f.lba + b, now);
                    }
                }
            }
        }
    }

    /// Advances the model's clock and services the raised vectors (or INTx).
    pub fn service(&mut self, us: u64) -> usize {
        self.fake.advance(us);
        let mut n = 0;
        let queues = self.ctrl.queues();
        let msix = self.ctrl.limits().host_msix_vectors > 0;
        let vectors: Vec<u16> = if msix {
            self.fake.take_vectors()
        } else if self.fake.intx_asserted() {
            vec![0]
        } else {
            vec![]
        };
        for v in vectors {
            assert!(v < queues || self.lenient);
            let mut done = Vec::new();
            if msix {
                n += self.ctrl.reap(v, &mut |c| done.push(c));
            } else {
                let _ = self.ctrl.handle_intx(&mut |c| done.push(c));
            }
            for c in done {
                self.accept(c, Some(v));
            }
        }
        n
    }

    /// Runs the controller's reset, collecting what it hands back.
    pub fn reset(&mut self) -> Result<(), Error> {
        let mut done = Vec::new();
        let mut report = Report::new();
        let r = self.ctrl.reset(&mut |c| done.push(c), &mut report);
        for c in done {
            self.accept(c, None);
        }
        r
    }

    /// What the kernel does for a dead controller once bus mastering is off: takes back every
    /// request still held. Returns how many.
    pub fn abandon_after_bus_master_off(&mut self) -> u32 {
        let mut done = Vec::new();
        let n = self.ctrl.abandon_in_flight(&mut |c| done.push(c));
        for c in done {
            self.accept(c, None);
        }
        n
    }

    /// Random reads and writes until `total` have been submitted and all have finished.
    pub fn run(&mut self, total: u64, max_segs: usize) {
        let tags = self.ctrl.limits().io_tags as u32;
        // Requests are submitted on the latency queues (every queue in latency mode).
        let (base, queues) = (self.ctrl.high_iops_queues(), self.ctrl.io_queues());
        let mut submitted = 0u64;
        let mut idle_rounds = 0;
        while submitted < total || !self.inflight.is_empty() {
            let burst = 1 + self.rng.below(64);
            for _ in 0..burst {
                if submitted >= total {
                    break;
                }
                let tag = self.rng.below(u64::from(tags)) as u32;
                if self.inflight.contains_key(&tag) {
                    continue;
                }
                let queue = base + self.rng.below(u64::from(queues)) as u16;
                let op = if self.rng.below(2) == 0 {
                    IoOp::Write
                } else {
                    IoOp::Read
                };
                let blocks = 1 + self.rng.below(4) as u32;
                let nseg = 1 + self.rng.below(max_segs as u64) as usize;
                match self.submit(tag, queue, op, blocks, nseg) {
                    Ok(()) => submitted += 1,
                    Err(e) if self.lenient => {
                        let _ = e;
                        submitted += 1;
                    }
                    Err(e) => panic!("submit: {e}"),
                }
            }
            let step = 1 + self.rng.below(150);
            let n = self.service(step);
            if n == 0 {
                idle_rounds += 1;
                if self.lenient && idle_rounds > 2000 {
                    return;
                }
                assert!(idle_rounds < 100_000, "no progress; {} in flight", self.inflight.len());
            } else {
                idle_rounds = 0;
            }
        }
    }
}
