//! A fake NVMe controller over [`devhal::fake::FakeMemory`], modelled on what QEMU 7.2's `nvme`
//! does (`hw/nvme/ctrl.c`) and strict where QEMU is: CFS on a bad enable, the queue
//! creation error codes and their order, PRP alignment (`0x4013`), MDTS (`0x4002`), LBA range
//! (`0x4080`), phase tags, doorbells, SQHD, one MSI-X message per CQ per doorbell pass on the
//! CQ's vector (recorded), MSI-X entry mask bits with pending bits (a message for a masked
//! vector is sent on unmask, or dropped with `msix_pending_bits = false`), INTx mode, namespaces with 512- and 4096-byte LBAs whose data lives in
//! memory, the state SeaBIOS leaves (enabled, with its own queues), per-LBA error injection,
//! held commands, an Abort that answers "not aborted", and a reset that drains.
//!
//! Hostile modes add bad completion entries (duplicate or invented CIDs, a wrong SQID or SQHD)
//! next to the genuine ones and count each ([`FakeStats::hostile_cqes`]), or corrupt genuine
//! entries (wrong phase, bad SQHD) so that the command can only be recovered by a timeout.
//!
//! Every device access goes through `FakeMemory`, so a stray address is recorded as a violation
//! and touches nothing. Written from the reference, independently of the driver's constants.

use alloc::collections::{BTreeMap, VecDeque};
use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, Ordering};

pub use devhal::fake::{FakeDma, FakeMemory};
use spin::Mutex;

use crate::{Delay, Mmio};

const PAGE: u64 = 4096;

/// One namespace of the fake.
#[derive(Clone, Debug)]
pub struct FakeNamespace {
    /// Namespace id (1..=256).
    pub nsid: u32,
    /// Logical block size (512 or 4096).
    pub lba_size: u32,
    /// Capacity in logical blocks.
    pub blocks: u64,
}

/// When I/O commands complete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FakeCompletion {
    /// Inside the doorbell write.
    Immediate,
    /// When the test calls [`FakeNvme::complete_pending`] (any order it chooses).
    Deferred,
}

/// Bad completion entries the fake adds or makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hostile {
    /// Well behaved.
    None,
    /// After each genuine completion, a copy of it.
    DuplicateCid,
    /// After each genuine completion, an entry with a CID no slot can have.
    InventedCid,
    /// After each genuine completion, a copy naming another SQ.
    WrongSqid,
    /// After each genuine completion, a copy with SQHD beyond the queue.
    BadSqhd,
    /// Each genuine completion is written with the wrong phase tag (the host never sees it).
    WrongPhase,
    /// Each genuine completion carries SQHD beyond the queue (the host refuses it).
    CorruptSqhd,
    /// Pseudo-random mix of the four "extra entry" kinds, seeded.
    Random(u64),
}

/// Construction parameters (QEMU's defaults by [`FakeConfig::new`]).
#[derive(Clone, Debug)]
pub struct FakeConfig {
    /// `max_ioqpairs`.
    pub max_ioqpairs: u16,
    /// `msix_qsize` (MSI-X table entries).
    pub msix_qsize: u16,
    /// Whether MSI-X is enabled (false: INTx).
    pub msix_enabled: bool,
    /// CAP.MQES (0's based).
    pub mqes: u16,
    /// CAP.TO in 500 ms units.
    pub timeout_units: u8,
    /// MDTS (0: no limit).
    pub mdts: u8,
    /// Namespaces.
    pub namespaces: Vec<FakeNamespace>,
    /// Start as SeaBIOS leaves it: enabled, admin queues and I/O pair 1 of its own.
    pub firmware_enabled: bool,
    /// RDY never changes (to test the CAP.TO deadline).
    pub ready_stuck: bool,
    /// Abort really aborts held commands (QEMU never does).
    pub abort_works: bool,
    /// Every enable fails with CFS (a controller that refuses to start).
    pub cfs_on_enable: bool,
    /// Admin commands are fetched but never completed.
    pub admin_silent: bool,
    /// When I/O completes.
    pub completion: FakeCompletion,
    /// Bus address of the first DMA allocation.
    pub phys_base: u64,
    /// A message for a masked MSI-X vector sets the entry's pending bit and is sent on unmask
    /// (PCI, QEMU). False: it is dropped (a device that would strand a completion if the
    /// driver relied on the pending bit alone).
    pub msix_pending_bits: bool,
    /// ONCS bit 2: Dataset Management (deallocate) supported, as on QEMU 7.2.
    pub dataset_management: bool,
}

impl FakeConfig {
    /// QEMU 7.2 defaults with `max_ioqpairs` pairs and one 64 MiB namespace of 512-byte blocks.
    pub fn new(max_ioqpairs: u16) -> Self {
        Self {
            max_ioqpairs,
            msix_qsize: max_ioqpairs + 1,
            msix_enabled: true,
            mqes: 0x7FF,
            timeout_units: 15,
            mdts: 7,
            namespaces: vec![FakeNamespace {
                nsid: 1,
                lba_size: 512,
                blocks: 131072,
            }],
            firmware_enabled: false,
            ready_stuck: false,
            abort_works: false,
            cfs_on_enable: false,
            admin_silent: false,
            completion: FakeCompletion::Immediate,
            phys_base: 0x1_0000_0000,
            msix_pending_bits: true,
            dataset_management: true,
        }
    }
}

/// Counters and findings.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FakeStats {
    /// I/O commands executed (completed or failed).
    pub io_commands: u64,
    /// Admin commands executed.
    pub admin_commands: u64,
    /// Completion entries written, bad ones included.
    pub cqes_posted: u64,
    /// Bad entries the hostile mode added (each must be refused by the driver).
    pub hostile_cqes: u64,
    /// Genuine entries the hostile mode corrupted.
    pub corrupted_cqes: u64,
    /// MSI-X messages sent, per vector.
    pub msix_per_vector: Vec<u64>,
    /// Messages that found their vector masked (held pending, or dropped without pending bits).
    pub msix_while_masked: u64,
    /// Vector mask bit changes (mask or unmask) written by the host.
    pub msix_mask_writes: u64,
    /// INTx assertions.
    pub intx_asserts: u64,
    /// Tail doorbell writes to I/O submission queues (valid ones: the admin SQ's and refused
    /// writes are not counted).
    pub io_sq_doorbells: u64,
    /// Commands an I/O submission queue doorbell made the fake fetch, per write, in order.
    pub io_sq_fetches: Vec<u32>,
    /// Protocol problems the fake saw (doorbell beyond queue, command on a missing queue ...).
    pub guest_errors: Vec<alloc::string::String>,
    /// Dataset Management ranges received: (nsid, starting LBA, blocks).
    pub deallocated: Vec<(u32, u64, u64)>,
    /// Times the controller was enabled (EN 0→1 that reached RDY).
    pub enables: u64,
    /// Times it was disabled (EN 1→0).
    pub disables: u64,
    /// Abort commands received.
    pub aborts: u64,
    /// Commands completed by a reset's drain.
    pub drained_by_reset: u64,
    /// Commands that were held and dropped by a reset.
    pub held_dropped_by_reset: u64,
}

#[derive(Clone, Copy, Debug)]
struct Ring {
    base: u64,
    entries: u32,
    head: u32,
    tail: u32,
}

#[derive(Clone, Copy, Debug)]
struct Cq {
    ring: Ring,
    phase: bool,
    iv: u16,
    ien: bool,
}

#[derive(Clone, Copy, Debug)]
struct Sq {
    ring: Ring,
    cqid: u16,
}

#[derive(Clone, Copy, Debug)]
struct Pending {
    sqid: u16,
    sqe: [u32; 16],
}

struct Dev {
    cfg: FakeConfig,
    cc: u32,
    csts: u32,
    aqa: u32,
    asq: u64,
    acq: u64,
    sqs: BTreeMap<u16, Sq>,
    cqs: BTreeMap<u16, Cq>,
    io_cq_created: bool,
    data: Vec<Vec<u8>>,
    /// (nsid, lba) -> (status, remaining failures; u32::MAX = forever).
    errors: BTreeMap<(u32, u64), (u16, u32)>,
    hold: Vec<(u32, u64)>,
    held: Vec<Pending>,
    pending: VecDeque<Pending>,
    /// CQ id -> entries waiting for room (the host did not move the head).
    overflow: BTreeMap<u16, VecDeque<[u32; 4]>>,
    hostile: Hostile,
    invented_cid: u16,
    rng: u64,
    signalled: Vec<u16>,
    messages: Vec<u16>,
    /// Messages per vector not yet taken by `take_vector`.
    unclaimed: Vec<u64>,
    /// Per MSI-X table entry: (mask bit, pending bit).
    msix_entries: Vec<(bool, bool)>,
    stats: FakeStats,
}

/// The fake controller.
pub struct FakeNvme {
    mem: Arc<FakeMemory>,
    dev: Mutex<Dev>,
    clock_us: AtomicU64,
}

impl FakeNvme {
    /// A controller in the state `cfg` describes.
    pub fn new(cfg: FakeConfig) -> Arc<Self> {
        let mem = FakeMemory::new(cfg.phys_base);
        let data = cfg
            .namespaces
            .iter()
            .map(|ns| vec![0u8; (ns.blocks * u64::from(ns.lba_size)) as usize])
            .collect();
        let msix = usize::from(cfg.msix_qsize);
        let mut dev = Dev {
            cc: 0,
            csts: 0,
            aqa: 0,
            asq: 0,
            acq: 0,
            sqs: BTreeMap::new(),
            cqs: BTreeMap::new(),
            io_cq_created: false,
            data,
            errors: BTreeMap::new(),
            hold: Vec::new(),
            held: Vec::new(),
            pending: VecDeque::new(),
            overflow: BTreeMap::new(),
            hostile: Hostile::None,
            invented_cid: 0xFFFF,
            rng: 0x9E37_79B9_7F4A_7C15,
            signalled: Vec::new(),
            messages: Vec::new(),
            unclaimed: vec![0; msix.max(1)],
            msix_entries: vec![(false, false); msix],
            stats: FakeStats {
                msix_per_vector: vec![0; msix],
                ..FakeStats::default()
            },
            cfg,
        };
        if dev.cfg.firmware_enabled {
            // SeaBIOS: admin queues (64/256 entries) and I/O pair 1 (256 entries, IEN=0) in its
            // own memory, CC=0x00460001, CSTS=1.
            let asq = mem.alloc_zeroed(64 * 64, 4096).expect("fake firmware memory").phys;
            let acq = mem.alloc_zeroed(256 * 16, 4096).expect("fake firmware memory").phys;
            let iosq = mem.alloc_zeroed(256 * 64, 4096).expect("fake firmware memory").phys;
            let iocq = mem.alloc_zeroed(256 * 16, 4096).expect("fake firmware memory").phys;
            dev.cc = 0x0046_0001;
            dev.csts = 1;
            dev.aqa = 0x00FF_003F;
            dev.asq = asq;
            dev.acq = acq;
            dev.create_admin();
            dev.cqs.insert(
                1,
                Cq {
                    ring: ring(iocq, 256),
                    phase: true,
                    iv: 0,
                    ien: false,
                },
            );
            dev.sqs.insert(
                1,
                Sq {
                    ring: ring(iosq, 256),
                    cqid: 1,
                },
            );
            dev.io_cq_created = true;
        }
        Arc::new(Self {
            mem,
            dev: Mutex::new(dev),
            clock_us: AtomicU64::new(0),
        })
    }

    /// The DMA address space (for test buffers and violation checks).
    pub fn memory(&self) -> &Arc<FakeMemory> {
        &self.mem
    }
    /// A `Dma` allocator in the fake's address space.
    pub fn dma(&self) -> FakeDma {
        self.mem.dma()
    }
    /// The register window.
    pub fn mmio(self: &Arc<Self>) -> FakeMmio {
        FakeMmio(Arc::clone(self))
    }
    /// A `Delay` that advances the fake's virtual clock (and completes deferred work, as time
    /// passing would).
    pub fn delay(self: &Arc<Self>) -> FakeDelay {
        FakeDelay(Arc::clone(self))
    }
    /// Virtual microseconds waited through [`FakeDelay`].
    pub fn clock_us(&self) -> u64 {
        self.clock_us.load(Ordering::Relaxed)
    }
    /// Counters.
    pub fn stats(&self) -> FakeStats {
        self.dev.lock().stats.clone()
    }
    /// Vectors signalled since the last call, in order.
    pub fn take_messages(&self) -> Vec<u16> {
        let mut d = self.dev.lock();
        d.unclaimed.iter_mut().for_each(|c| *c = 0);
        core::mem::take(&mut d.messages)
    }
    /// Messages on `vector` since the last call (for tests where each CPU thread takes the
    /// interrupts aimed at it).
    pub fn take_vector(&self, vector: u16) -> u64 {
        let mut d = self.dev.lock();
        d.messages.clear();
        d.unclaimed.get_mut(usize::from(vector)).map_or(0, core::mem::take)
    }
    /// Sets or clears MSI-X table entry `vector`'s mask bit, as the host's write to the entry's
    /// vector control would. Unmasking an entry whose pending bit is set sends its message.
    /// An entry beyond the table is recorded as a guest error.
    pub fn set_vector_masked(&self, vector: u16, masked: bool) {
        let mut d = self.dev.lock();
        let v = usize::from(vector);
        let Some(&(_, pending)) = d.msix_entries.get(v) else {
            d.stats
                .guest_errors
                .push(alloc::format!("MSI-X mask write to entry {vector} beyond the table"));
            return;
        };
        d.stats.msix_mask_writes += 1;
        d.msix_entries[v] = (masked, pending && masked);
        if !masked && pending {
            d.send_msix(vector);
        }
    }
    /// Whether MSI-X table entry `vector` is masked.
    pub fn vector_masked(&self, vector: u16) -> bool {
        self.dev
            .lock()
            .msix_entries
            .get(usize::from(vector))
            .is_some_and(|e| e.0)
    }
    /// Sets the hostile mode.
    pub fn set_hostile(&self, h: Hostile) {
        let mut d = self.dev.lock();
        d.hostile = h;
        if let Hostile::Random(seed) = h {
            d.rng = seed | 1;
        }
    }
    /// The CID [`Hostile::InventedCid`] uses (a test passes one it knows names no command).
    pub fn set_invented_cid(&self, cid: u16) {
        self.dev.lock().invented_cid = cid;
    }
    /// Commands touching `lba` of `nsid` fail with `status` (`times` times; `u32::MAX`: always).
    pub fn inject_error(&self, nsid: u32, lba: u64, status: u16, times: u32) {
        self.dev.lock().errors.insert((nsid, lba), (status, times));
    }
    /// Commands touching `lba` of `nsid` are held (never complete) until
    /// [`FakeNvme::release_held`] (which also ends the rule). Like QEMU's blkdebug `break`.
    pub fn hold(&self, nsid: u32, lba: u64) {
        self.dev.lock().hold.push((nsid, lba));
    }
    /// RDY stops following EN from now on (a controller that hangs in a reset).
    /// Un-sticking it lets a pending disable finish (RDY drops if EN is 0).
    pub fn set_ready_stuck(&self, stuck: bool) {
        let mut d = self.dev.lock();
        d.cfg.ready_stuck = stuck;
        if !stuck && d.cc & 1 == 0 {
            d.csts &= !1;
        }
    }
    /// Held commands right now.
    pub fn held(&self) -> usize {
        self.dev.lock().held.len()
    }
    /// Completes every held command.
    pub fn release_held(&self) {
        let mut d = self.dev.lock();
        d.hold.clear();
        let held = core::mem::take(&mut d.held);
        for p in held {
            d.execute_io(&self.mem, p);
        }
        d.flush_signals();
    }
    /// Deferred commands waiting.
    pub fn pending(&self) -> usize {
        self.dev.lock().pending.len()
    }
    /// Completes up to `n` deferred commands, picking each with `pick(count)` (an index below
    /// `count`), so a test chooses the completion order.
    pub fn complete_pending(&self, n: usize, mut pick: impl FnMut(usize) -> usize) -> usize {
        let mut d = self.dev.lock();
        let mut done = 0;
        while done < n && !d.pending.is_empty() {
            let i = pick(d.pending.len()) % d.pending.len();
            let p = d.pending.remove(i).expect("index in range");
            d.execute_io(&self.mem, p);
            done += 1;
        }
        d.flush_signals();
        done
    }
    /// Reads namespace data directly (test verification).
    pub fn read_data(&self, nsid: u32, offset: usize, len: usize) -> Vec<u8> {
        let d = self.dev.lock();
        let i = d.ns_index(nsid).expect("namespace exists");
        d.data[i][offset..offset + len].to_vec()
    }
    /// CC and CSTS now.
    pub fn cc_csts(&self) -> (u32, u32) {
        let d = self.dev.lock();
        (d.cc, d.csts)
    }
    /// Number of I/O queue pairs created, and the (vector, IEN) of each CQ.
    pub fn io_cqs(&self) -> Vec<(u16, u16, bool)> {
        self.dev
            .lock()
            .cqs
            .iter()
            .filter(|(id, _)| **id != 0)
            .map(|(id, cq)| (*id, cq.iv, cq.ien))
            .collect()
    }

    fn read_reg(&self, off: u32) -> u32 {
        let d = self.dev.lock();
        let cap: u64 = u64::from(d.cfg.mqes)
            | 1 << 16
            | u64::from(d.cfg.timeout_units) << 24
            | 1 << 37
            | 1 << 43
            | 1 << 44
            | 4 << 52;
        match off {
            0x00 => cap as u32,
            0x04 => (cap >> 32) as u32,
            0x08 => 0x0001_0400,
            0x14 => d.cc,
            0x1C => d.csts,
            0x24 => d.aqa,
            0x28 => d.asq as u32,
            0x2C => (d.asq >> 32) as u32,
            0x30 => d.acq as u32,
            0x34 => (d.acq >> 32) as u32,
            _ => 0,
        }
    }

    fn write_reg(&self, off: u32, value: u32) {
        let mut d = self.dev.lock();
        match off {
            0x0C | 0x10 => {}
            0x14 => d.write_cc(&self.mem, value),
            0x24 => d.aqa = value,
            0x28 => d.asq = (d.asq & !0xFFFF_FFFF) | u64::from(value),
            0x2C => d.asq = (d.asq & 0xFFFF_FFFF) | u64::from(value) << 32,
            0x30 => d.acq = (d.acq & !0xFFFF_FFFF) | u64::from(value),
            0x34 => d.acq = (d.acq & 0xFFFF_FFFF) | u64::from(value) << 32,
            o if o >= 0x1000 && o % 4 == 0 => {
                let idx = (o - 0x1000) / 4;
                let qid = (idx / 2) as u16;
                if idx % 2 == 0 {
                    d.sq_doorbell(&self.mem, qid, value);
                } else {
                    d.cq_doorbell(&self.mem, qid, value);
                }
                d.flush_signals();
            }
            _ => {}
        }
    }
}

fn ring(base: u64, entries: u32) -> Ring {
    Ring {
        base,
        entries,
        head: 0,
        tail: 0,
    }
}

impl Dev {
    fn ns_index(&self, nsid: u32) -> Option<usize> {
        self.cfg.namespaces.iter().position(|n| n.nsid == nsid)
    }

    fn guest_error(&mut self, msg: alloc::string::String) {
        self.stats.guest_errors.push(msg);
    }

    fn create_admin(&mut self) {
        let sqs = (self.aqa & 0xFFF) + 1;
        let cqs = ((self.aqa >> 16) & 0xFFF) + 1;
        self.sqs.insert(
            0,
            Sq {
                ring: ring(self.asq, sqs),
                cqid: 0,
            },
        );
        self.cqs.insert(
            0,
            Cq {
                ring: ring(self.acq, cqs),
                phase: true,
                iv: 0,
                ien: true,
            },
        );
    }

    fn write_cc(&mut self, mem: &FakeMemory, value: u32) {
        let was = self.cc & 1 != 0;
        let en = value & 1 != 0;
        self.cc = value;
        if (value >> 14) & 3 != 0 {
            // Shutdown notification: SHST = complete at once (QEMU).
            self.csts = (self.csts & !0xC) | 0x8;
        }
        if was && !en {
            self.stats.disables += 1;
            self.reset(mem);
            if !self.cfg.ready_stuck {
                self.csts &= !1;
            }
            self.csts &= !2;
        } else if !was && en {
            let iosqes = (value >> 16) & 0xF;
            let iocqes = (value >> 20) & 0xF;
            let mps = (value >> 7) & 0xF;
            let css = (value >> 4) & 7;
            let ok = iosqes == 6
                && iocqes == 4
                && mps <= 4
                && matches!(css, 0 | 6 | 7)
                && self.asq.is_multiple_of(PAGE)
                && self.acq.is_multiple_of(PAGE)
                && self.aqa & 0xFFF != 0
                && (self.aqa >> 16) & 0xFFF != 0;
            if !ok || self.cfg.cfs_on_enable {
                self.csts |= 2;
                return;
            }
            if self.cfg.ready_stuck {
                return;
            }
            self.create_admin();
            self.csts |= 1;
            self.stats.enables += 1;
        }
    }

    /// Controller reset inside the MMIO write (QEMU): drain in-flight I/O into the old CQs,
    /// drop held commands, free every queue.
    fn reset(&mut self, mem: &FakeMemory) {
        let pending: Vec<Pending> = self.pending.drain(..).collect();
        for p in pending {
            self.stats.drained_by_reset += 1;
            self.execute_io(mem, p);
        }
        self.stats.held_dropped_by_reset += self.held.len() as u64;
        self.held.clear();
        self.sqs.clear();
        self.cqs.clear();
        self.overflow.clear();
        self.io_cq_created = false;
        self.signalled.clear();
    }

    fn sq_doorbell(&mut self, mem: &FakeMemory, qid: u16, value: u32) {
        if self.csts & 1 == 0 {
            self.guest_error(alloc::format!("SQ {qid} doorbell while not ready"));
            return;
        }
        let Some(sq) = self.sqs.get_mut(&qid) else {
            self.guest_error(alloc::format!("doorbell of missing SQ {qid}"));
            return;
        };
        if value >= sq.ring.entries {
            self.guest_error(alloc::format!("SQ {qid} tail {value} beyond the queue"));
            return;
        }
        sq.ring.tail = value;
        if qid != 0 {
            self.stats.io_sq_doorbells += 1;
            let sq = &self.sqs[&qid].ring;
            let fetched = (sq.tail + sq.entries - sq.head) % sq.entries;
            self.stats.io_sq_fetches.push(fetched);
        }
        // Fetch everything up to the tail (QEMU does, so SQHD tracks the tail).
        loop {
            let sq = self.sqs.get_mut(&qid).expect("checked above");
            if sq.ring.head == sq.ring.tail {
                break;
            }
            let addr = sq.ring.base + u64::from(sq.ring.head) * 64;
            sq.ring.head = (sq.ring.head + 1) % sq.ring.entries;
            let mut b = [0u8; 64];
            if !mem.read("SQ entry", addr, &mut b) {
                self.csts |= 2;
                return;
            }
            let mut sqe = [0u32; 16];
            for (i, d) in sqe.iter_mut().enumerate() {
                *d = u32::from_le_bytes([b[i * 4], b[i * 4 + 1], b[i * 4 + 2], b[i * 4 + 3]]);
            }
            let p = Pending { sqid: qid, sqe };
            if qid == 0 {
                if !self.cfg.admin_silent {
                    self.execute_admin(mem, p);
                }
            } else if self.cfg.completion == FakeCompletion::Deferred {
                self.pending.push_back(p);
            } else {
                self.execute_io(mem, p);
            }
        }
    }

    fn cq_doorbell(&mut self, mem: &FakeMemory, qid: u16, value: u32) {
        let Some(cq) = self.cqs.get_mut(&qid) else {
            return;
        };
        if value >= cq.ring.entries {
            // Ignored silently, as QEMU does (it raises an AER only if one is outstanding).
            return;
        }
        cq.ring.head = value;
        // Entries that waited for room.
        while let Some(dw) = self.overflow.get_mut(&qid).and_then(|o| o.pop_front()) {
            if !self.write_cqe(mem, qid, dw) {
                self.overflow.entry(qid).or_default().push_front(dw);
                break;
            }
        }
    }

    /// Writes one entry into CQ `qid` (the phase is set here). False when the CQ is full.
    fn write_cqe(&mut self, mem: &FakeMemory, qid: u16, mut dw: [u32; 4]) -> bool {
        let Some(cq) = self.cqs.get_mut(&qid) else {
            return true;
        };
        if (cq.ring.tail + 1) % cq.ring.entries == cq.ring.head {
            return false;
        }
        let phase_bit = u32::from(cq.phase) << 16;
        dw[3] = (dw[3] & !(1 << 16)) | phase_bit;
        if dw[1] == 0xDEAD {
            // Marker for "write with the wrong phase".
            dw[1] = 0;
            dw[3] ^= 1 << 16;
        }
        let addr = cq.ring.base + u64::from(cq.ring.tail) * 16;
        let mut b = [0u8; 16];
        for (i, d) in dw.iter().enumerate() {
            b[i * 4..i * 4 + 4].copy_from_slice(&d.to_le_bytes());
        }
        // DW3 (with the phase) last, as a device must.
        let ok = mem.write("CQ entry", addr, &b[..12]) && mem.write("CQ entry", addr + 12, &b[12..]);
        cq.ring.tail += 1;
        if cq.ring.tail == cq.ring.entries {
            cq.ring.tail = 0;
            cq.phase = !cq.phase;
        }
        if !ok {
            self.csts |= 2;
        }
        self.stats.cqes_posted += 1;
        if !self.signalled.contains(&qid) {
            self.signalled.push(qid);
        }
        true
    }

    fn post(&mut self, mem: &FakeMemory, sqid: u16, cid: u16, status: u16, result: u32) {
        let Some(sq) = self.sqs.get(&sqid).copied() else {
            return;
        };
        let dw = [
            result,
            0,
            sq.ring.head | u32::from(sqid) << 16,
            u32::from(cid) | u32::from(status) << 17,
        ];
        if !self.write_or_queue(mem, sq.cqid, dw) || sqid == 0 {
            return;
        }
        let extra = match self.hostile {
            Hostile::Random(_) => {
                self.rng ^= self.rng << 13;
                self.rng ^= self.rng >> 7;
                self.rng ^= self.rng << 17;
                match self.rng % 6 {
                    0 => Hostile::DuplicateCid,
                    1 => Hostile::InventedCid,
                    2 => Hostile::WrongSqid,
                    3 => Hostile::BadSqhd,
                    _ => Hostile::None,
                }
            }
            h => h,
        };
        let bad = match extra {
            Hostile::DuplicateCid => Some(dw),
            Hostile::InventedCid => Some([0, 0, dw[2], u32::from(self.invented_cid) | u32::from(status) << 17]),
            Hostile::WrongSqid => Some([0, 0, sq.ring.head | u32::from(sqid + 100) << 16, dw[3]]),
            Hostile::BadSqhd => Some([0, 0, (sq.ring.entries + 5) | u32::from(sqid) << 16, dw[3]]),
            _ => None,
        };
        if let Some(bad) = bad {
            self.stats.hostile_cqes += 1;
            self.write_or_queue(mem, sq.cqid, bad);
        }
    }

    fn write_or_queue(&mut self, mem: &FakeMemory, cqid: u16, mut dw: [u32; 4]) -> bool {
        match self.hostile {
            Hostile::WrongPhase if cqid != 0 => {
                dw[1] = 0xDEAD;
                self.stats.corrupted_cqes += 1;
            }
            Hostile::CorruptSqhd if cqid != 0 => {
                dw[2] = (dw[2] & 0xFFFF_0000) | 0xFFFF;
                self.stats.corrupted_cqes += 1;
            }
            _ => {}
        }
        let queued = self.overflow.get(&cqid).is_some_and(|o| !o.is_empty());
        if queued || !self.write_cqe(mem, cqid, dw) {
            self.overflow.entry(cqid).or_default().push_back(dw);
        }
        true
    }

    /// One MSI-X message (or INTx assertion) per CQ that got entries in this pass.
    fn flush_signals(&mut self) {
        for qid in core::mem::take(&mut self.signalled) {
            let Some(cq) = self.cqs.get(&qid) else { continue };
            if !cq.ien || cq.ring.tail == cq.ring.head {
                continue;
            }
            if self.cfg.msix_enabled {
                let iv = cq.iv;
                match self.msix_entries.get_mut(usize::from(iv)) {
                    Some((true, pending)) => {
                        self.stats.msix_while_masked += 1;
                        *pending = self.cfg.msix_pending_bits;
                    }
                    _ => self.send_msix(iv),
                }
            } else {
                self.stats.intx_asserts += 1;
                self.messages.push(0);
                self.unclaimed[0] += 1;
            }
        }
    }

    fn send_msix(&mut self, iv: u16) {
        let v = usize::from(iv);
        if let Some(c) = self.stats.msix_per_vector.get_mut(v) {
            *c += 1;
        }
        self.messages.push(iv);
        if let Some(c) = self.unclaimed.get_mut(v) {
            *c += 1;
        }
    }

    fn execute_admin(&mut self, mem: &FakeMemory, p: Pending) {
        self.stats.admin_commands += 1;
        let dw = p.sqe;
        let opcode = dw[0] as u8;
        let cid = (dw[0] >> 16) as u16;
        let prp1 = u64::from(dw[6]) | u64::from(dw[7]) << 32;
        let (status, result) = if (dw[0] >> 14) & 3 != 0 {
            (0x4002, 0)
        } else {
            match opcode {
                0x06 => self.identify(mem, dw[1], dw[10] & 0xFF, prp1),
                0x09 => self.set_features(dw[10], dw[11]),
                0x05 => (self.create_cq(dw[10], dw[11], prp1), 0),
                0x01 => (self.create_sq(dw[10], dw[11], prp1), 0),
                0x00 => (self.delete_sq(dw[10] as u16), 0),
                0x04 => (self.delete_cq(dw[10] as u16), 0),
                0x08 => self.abort(mem, dw[10]),
                _ => (0x4001, 0),
            }
        };
        self.post(mem, 0, cid, status, result);
    }

    fn identify(&mut self, mem: &FakeMemory, nsid: u32, cns: u32, prp1: u64) -> (u16, u32) {
        if !prp1.is_multiple_of(4) {
            return (0x4013, 0);
        }
        let mut page = vec![0u8; 4096];
        match cns {
            0x01 => {
                page[0..2].copy_from_slice(&0x1b36u16.to_le_bytes());
                page[2..4].copy_from_slice(&0x1af4u16.to_le_bytes());
                let text = |p: &mut [u8], s: &str, len: usize| {
                    for (i, b) in p[..len].iter_mut().enumerate() {
                        *b = *s.as_bytes().get(i).unwrap_or(&b' ');
                    }
                };
                text(&mut page[4..24], "fake0", 20);
                text(&mut page[24..64], "QEMU NVMe Ctrl", 40);
                text(&mut page[64..72], "7.2.22", 8);
                page[77] = self.cfg.mdts;
                page[512] = 0x66;
                page[513] = 0x44;
                page[516..520].copy_from_slice(&256u32.to_le_bytes());
                page[525] = 0x07;
                // ONCS: QEMU 7.2's 0x015D (Compare, DSM, Write Zeroes, Save/Select, Timestamp,
                // Copy), DSM (bit 2) only when on.
                let oncs: u16 = 0x0159 | u16::from(self.cfg.dataset_management) << 2;
                page[520..522].copy_from_slice(&oncs.to_le_bytes());
            }
            0x02 => {
                let mut ids: Vec<u32> = self
                    .cfg
                    .namespaces
                    .iter()
                    .map(|n| n.nsid)
                    .filter(|&n| n > nsid)
                    .collect();
                ids.sort_unstable();
                for (i, id) in ids.iter().take(1024).enumerate() {
                    page[i * 4..i * 4 + 4].copy_from_slice(&id.to_le_bytes());
                }
            }
            0x00 => {
                if nsid == 0 || nsid > 256 {
                    return (0x400B, 0);
                }
                if let Some(i) = self.ns_index(nsid) {
                    let ns = &self.cfg.namespaces[i];
                    for off in [0, 8, 16] {
                        page[off..off + 8].copy_from_slice(&ns.blocks.to_le_bytes());
                    }
                    page[24] = 0x14;
                    page[25] = 7;
                    page[26] = if ns.lba_size == 4096 { 4 } else { 0 };
                    for f in 0..8usize {
                        let ms: u32 = [0, 8, 16, 64][f % 4];
                        let lbads: u32 = if f < 4 { 9 } else { 12 };
                        let v = ms | lbads << 16;
                        page[128 + 4 * f..132 + 4 * f].copy_from_slice(&v.to_le_bytes());
                    }
                }
            }
            _ => return (0x4002, 0),
        }
        // One page from PRP1 (the driver's buffers are page aligned).
        if !mem.write("identify data", prp1, &page) {
            return (0x4004, 0);
        }
        (0, 0)
    }

    fn set_features(&mut self, cdw10: u32, cdw11: u32) -> (u16, u32) {
        if cdw10 & (1 << 31) != 0 {
            return (0x410D, 0);
        }
        match cdw10 & 0xFF {
            0x07 => {
                if self.io_cq_created {
                    return (0x400C, 0);
                }
                if cdw11 & 0xFFFF == 0xFFFF || cdw11 >> 16 == 0xFFFF {
                    return (0x4002, 0);
                }
                let n = u32::from(self.cfg.max_ioqpairs - 1);
                (0, n << 16 | n)
            }
            0x08 | 0x09 => (0x410E, 0),
            _ => (0x4002, 0),
        }
    }

    fn create_cq(&mut self, cdw10: u32, cdw11: u32, prp1: u64) -> u16 {
        let qid = cdw10 as u16;
        let size = (cdw10 >> 16) + 1;
        let iv = (cdw11 >> 16) as u16;
        let ien = cdw11 & 2 != 0;
        if qid == 0 || qid > self.cfg.max_ioqpairs || self.cqs.contains_key(&qid) {
            return 0x4101;
        }
        if size < 2 || size > u32::from(self.cfg.mqes) + 1 {
            return 0x4102;
        }
        if !prp1.is_multiple_of(PAGE) {
            return 0x4013;
        }
        if (iv != 0 && !self.cfg.msix_enabled) || iv >= self.cfg.msix_qsize {
            return 0x4108;
        }
        if cdw11 & 1 == 0 {
            return 0x4002;
        }
        self.cqs.insert(
            qid,
            Cq {
                ring: ring(prp1, size),
                phase: true,
                iv,
                ien,
            },
        );
        self.io_cq_created = true;
        0
    }

    fn create_sq(&mut self, cdw10: u32, cdw11: u32, prp1: u64) -> u16 {
        let qid = cdw10 as u16;
        let size = (cdw10 >> 16) + 1;
        let cqid = (cdw11 >> 16) as u16;
        if qid == 0 || qid > self.cfg.max_ioqpairs || self.sqs.contains_key(&qid) {
            return 0x4101;
        }
        if cqid == 0 || !self.cqs.contains_key(&cqid) {
            return 0x4100;
        }
        if size < 2 || size > u32::from(self.cfg.mqes) + 1 {
            return 0x4102;
        }
        if !prp1.is_multiple_of(PAGE) {
            return 0x4013;
        }
        if cdw11 & 1 == 0 {
            return 0x4002;
        }
        self.sqs.insert(
            qid,
            Sq {
                ring: ring(prp1, size),
                cqid,
            },
        );
        0
    }

    fn delete_sq(&mut self, qid: u16) -> u16 {
        if qid == 0 || self.sqs.remove(&qid).is_none() {
            return 0x4101;
        }
        self.pending.retain(|p| p.sqid != qid);
        0
    }

    fn delete_cq(&mut self, qid: u16) -> u16 {
        if qid == 0 || !self.cqs.contains_key(&qid) {
            return 0x4100;
        }
        if self.sqs.values().any(|s| s.cqid == qid) {
            return 0x010C;
        }
        self.cqs.remove(&qid);
        0
    }

    fn abort(&mut self, mem: &FakeMemory, cdw10: u32) -> (u16, u32) {
        self.stats.aborts += 1;
        let sqid = cdw10 as u16;
        let cid = (cdw10 >> 16) as u16;
        if sqid == 0 || !self.sqs.contains_key(&sqid) {
            return (0x4002, 0);
        }
        if self.cfg.abort_works
            && let Some(i) = self
                .held
                .iter()
                .position(|p| p.sqid == sqid && (p.sqe[0] >> 16) as u16 == cid)
        {
            self.held.remove(i);
            self.post(mem, sqid, cid, 0x0007, 0);
            return (0, 0);
        }
        // QEMU: success with DW0 bit 0 = 1, "not aborted", for any CID.
        (0, 1)
    }

    fn execute_io(&mut self, mem: &FakeMemory, p: Pending) {
        if !self.sqs.contains_key(&p.sqid) {
            return;
        }
        let dw = p.sqe;
        let opcode = dw[0] as u8;
        let cid = (dw[0] >> 16) as u16;
        let nsid = dw[1];
        let status = match opcode {
            0x00 => {
                if nsid == 0 {
                    0x400B
                } else if nsid == u32::MAX || self.ns_index(nsid).is_some() {
                    0
                } else {
                    0x4002
                }
            }
            0x01 | 0x02 => {
                let slba = u64::from(dw[10]) | u64::from(dw[11]) << 32;
                let blocks = u64::from(dw[12] & 0xFFFF) + 1;
                if self
                    .hold
                    .iter()
                    .any(|&(hn, hl)| hn == nsid && (slba..slba.saturating_add(blocks)).contains(&hl))
                {
                    self.held.push(p);
                    return;
                }
                self.read_write(mem, opcode == 0x01, &dw, nsid, slba, blocks)
            }
            0x09 if self.cfg.dataset_management => self.dataset_management(mem, &dw, nsid),
            _ => 0x4001,
        };
        self.stats.io_commands += 1;
        self.post(mem, p.sqid, cid, status, 0);
    }

    /// Dataset Management: with the Deallocate attribute, each range's blocks read back as zeros
    /// afterwards (QEMU 7.2 reports DLFEAT "deallocated blocks read as zeros"). Every command
    /// is recorded in `stats.deallocated` as (nsid, slba, blocks) per range.
    fn dataset_management(&mut self, mem: &FakeMemory, dw: &[u32; 16], nsid: u32) -> u16 {
        if nsid == 0 || nsid > 256 {
            return 0x400B;
        }
        let Some(i) = self.ns_index(nsid) else {
            return 0x4002;
        };
        let ns = self.cfg.namespaces[i].clone();
        let ranges = (dw[10] & 0xFF) as usize + 1;
        let prp1 = u64::from(dw[6]) | u64::from(dw[7]) << 32;
        let prp2 = u64::from(dw[8]) | u64::from(dw[9]) << 32;
        let Some(pages) = walk_prps(mem, prp1, prp2, ranges as u64 * 16) else {
            return 0x4013;
        };
        let mut list = vec![0u8; ranges * 16];
        // `true`: from host memory to the device, as a write's data goes.
        if !mem.transfer(
            true,
            pages.into_iter().map(|(addr, len)| (addr, len as usize)),
            &mut list,
        ) {
            return 0x4004;
        }
        let deallocate = dw[11] & (1 << 2) != 0;
        for range in list.chunks_exact(16) {
            let blocks = u64::from(u32::from_le_bytes(range[4..8].try_into().unwrap_or_default()));
            let slba = u64::from_le_bytes(range[8..16].try_into().unwrap_or_default());
            if slba.checked_add(blocks).is_none_or(|end| end > ns.blocks) {
                return 0x4080;
            }
            self.stats.deallocated.push((nsid, slba, blocks));
            if deallocate {
                let size = u64::from(ns.lba_size);
                self.data[i][(slba * size) as usize..((slba + blocks) * size) as usize].fill(0);
            }
        }
        0
    }

    fn read_write(&mut self, mem: &FakeMemory, write: bool, dw: &[u32; 16], nsid: u32, slba: u64, blocks: u64) -> u16 {
        if nsid == 0 || nsid > 256 {
            return 0x400B;
        }
        let Some(i) = self.ns_index(nsid) else {
            return 0x4002;
        };
        let ns = self.cfg.namespaces[i].clone();
        if slba.checked_add(blocks).is_none_or(|end| end > ns.blocks) {
            return 0x4080;
        }
        let bytes = blocks * u64::from(ns.lba_size);
        if self.cfg.mdts != 0 && bytes > PAGE << self.cfg.mdts {
            return 0x4002;
        }
        for lba in slba..slba + blocks {
            if let Some((status, left)) = self.errors.get_mut(&(nsid, lba)) {
                let s = *status;
                if *left != u32::MAX {
                    *left -= 1;
                }
                if *left == 0 {
                    self.errors.remove(&(nsid, lba));
                }
                return s;
            }
        }
        let prp1 = u64::from(dw[6]) | u64::from(dw[7]) << 32;
        let prp2 = u64::from(dw[8]) | u64::from(dw[9]) << 32;
        let Some(pages) = walk_prps(mem, prp1, prp2, bytes) else {
            return 0x4013;
        };
        let start = (slba * u64::from(ns.lba_size)) as usize;
        let disk = &mut self.data[i][start..start + bytes as usize];
        if !mem.transfer(write, pages.into_iter().map(|(addr, len)| (addr, len as usize)), disk) {
            return 0x4004;
        }
        0
    }
}

/// The (address, length) runs PRP1/PRP2 describe for `bytes`, with QEMU's checks (`None`:
/// PRP Offset Invalid).
fn walk_prps(mem: &FakeMemory, prp1: u64, prp2: u64, bytes: u64) -> Option<Vec<(u64, u64)>> {
    if !prp1.is_multiple_of(4) {
        return None;
    }
    let mut out = Vec::new();
    let first = bytes.min(PAGE - prp1 % PAGE);
    out.push((prp1, first));
    let mut left = bytes - first;
    if left == 0 {
        return Some(out);
    }
    if left <= PAGE {
        if !prp2.is_multiple_of(PAGE) {
            return None;
        }
        out.push((prp2, left));
        return Some(out);
    }
    if !prp2.is_multiple_of(8) {
        return None;
    }
    let mut entry = prp2;
    while left > 0 {
        let value = mem.read_u64("PRP list", entry)?;
        let last_in_page = (entry % PAGE) == PAGE - 8;
        if last_in_page && left > PAGE {
            if value % 8 != 0 {
                return None;
            }
            entry = value;
            continue;
        }
        if value % PAGE != 0 {
            return None;
        }
        let n = left.min(PAGE);
        out.push((value, n));
        left -= n;
        entry += 8;
    }
    Some(out)
}

/// The register window of a [`FakeNvme`].
#[derive(Clone)]
pub struct FakeMmio(Arc<FakeNvme>);

impl Mmio for FakeMmio {
    fn read32(&self, offset: u32) -> u32 {
        self.0.read_reg(offset)
    }
    fn write32(&self, offset: u32, value: u32) {
        self.0.write_reg(offset, value);
    }
}

/// A [`Delay`] over the fake's virtual clock: waits return at once and advance the clock, so a
/// deadline test (RDY that never comes, an admin command that never completes) runs instantly.
#[derive(Clone)]
pub struct FakeDelay(Arc<FakeNvme>);

impl Delay for FakeDelay {
    fn delay_us(&self, us: u32) {
        self.0.clock_us.fetch_add(u64::from(us.max(1)), Ordering::Relaxed);
    }
}
