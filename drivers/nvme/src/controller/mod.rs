//! The controller: bring-up from any state, the admin queue (polled), identify, I/O queue pairs,
//! command submission, completion-queue draining with validation, abort and controller reset.
//!
//! Locking: the admin queue, each submission queue and each completion queue have their own spin
//! lock. No path holds an SQ lock and a CQ lock at once, except the reset, which takes every lock
//! in one fixed order (admin, then each pair's SQ and CQ in queue order). Callers run with
//! interrupts disabled on their CPU (the kernel enters blk that way), so an interrupt handler
//! never spins on a lock its own CPU holds.

use alloc::vec;
use alloc::vec::Vec;
use core::fmt;
use core::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering, fence};

use spin::Mutex;

use crate::cmd::{Cqe, IoCmd, Sqe, cns};
use crate::plan::QueuePlan;
use crate::prp;
use crate::regs::{self, CQE_SIZE, Cap, Csts, PAGE_SIZE, SQE_SIZE};
use crate::status::{NvmeStatus, StatusKind};
use crate::{Delay, Dma, Error, Mmio};
use devhal::DmaBuf;

/// Tunables. `Config::default()` suits QEMU and real hardware.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// Admin queue entries (SQ and CQ).
    pub admin_entries: u32,
    /// I/O queue pairs to ask for in Set Features Number of Queues (the kernel passes
    /// `min(CPUs, nvme.queues)`).
    pub requested_io_queues: u16,
    /// Block-layer tags per namespace per hardware queue. Each I/O submission queue holds
    /// `namespaces × this + 1` entries (capped by CAP.MQES), so the depth may be lowered.
    pub queue_depth: u32,
    /// How long a polled admin command may take.
    pub admin_timeout_us: u64,
    /// Poll interval of admin commands and RDY waits.
    pub poll_us: u32,
    /// Upper bound on one transfer when MDTS is 0 (no limit) or larger.
    pub max_transfer_bytes: u64,
    /// How often a command that failed without DNR is re-issued before its error is reported.
    pub max_retries: u8,
    /// Command slots per I/O queue kept apart from the block layer's for the device floor
    /// (`blkdev::Host::measure_floor`), after the `namespaces × queue_depth` block-layer slots
    /// (0: none, no floor).
    pub floor_slots: u32,
    /// Commands posted with a deferred doorbell (a block-layer burst) after which the SQ tail
    /// doorbell is rung anyway: the device then starts on them while the CPU builds the rest
    /// of the burst (`nvme.doorbell_batch=`; at least 1, which rings for every command).
    pub doorbell_batch: u32,
}

/// [`Config::doorbell_batch`] by default (chosen by measurement, docs/bench.md).
pub const DEFAULT_DOORBELL_BATCH: u32 = 8;

impl Default for Config {
    fn default() -> Self {
        Self {
            admin_entries: 32,
            requested_io_queues: 64,
            queue_depth: 128,
            admin_timeout_us: 5_000_000,
            poll_us: 10,
            max_transfer_bytes: 512 * 1024,
            max_retries: 3,
            floor_slots: 0,
            doorbell_batch: DEFAULT_DOORBELL_BATCH,
        }
    }
}

/// What Identify Controller said that the driver uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControllerInfo {
    /// PCI vendor id.
    pub vid: u16,
    /// Serial number (trimmed).
    pub serial: alloc::string::String,
    /// Model number (trimmed).
    pub model: alloc::string::String,
    /// Firmware revision (trimmed).
    pub firmware: alloc::string::String,
    /// MDTS (0: no limit).
    pub mdts: u8,
    /// Number of namespaces.
    pub nn: u32,
    /// Volatile write cache present.
    pub volatile_cache: bool,
    /// ONCS bit 2: the Dataset Management command (deallocate, i.e. discard) is supported.
    pub dataset_management: bool,
}

/// One active namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NamespaceInfo {
    /// Namespace id.
    pub nsid: u32,
    /// Logical block size in bytes (512 or 4096 on QEMU).
    pub lba_size: u32,
    /// Capacity in logical blocks (NSZE).
    pub blocks: u64,
    /// Largest transfer the driver sends, in bytes (MDTS and the driver's cap).
    pub max_transfer: u64,
}

/// Counters of what the driver saw and did. Read with [`Controller::report`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// I/O commands posted (re-posts included).
    pub commands: u64,
    /// Completions accepted.
    pub completions: u64,
    /// Completion entries refused (bad SQID, CID not outstanding, SQHD out of range).
    pub bogus_cqes: u64,
    /// Completions that carried an error status.
    pub errors: u64,
    /// Commands re-issued after an error without DNR.
    pub error_retries: u64,
    /// Abort commands sent.
    pub aborts_sent: u64,
    /// Aborts the controller said it performed (DW0 bit 0 = 0).
    pub aborts_succeeded: u64,
    /// Controller resets done.
    pub resets: u64,
    /// Controller resets that failed (the controller stays failed).
    pub resets_failed: u64,
    /// Requests re-issued by a reset.
    pub reset_reissued: u64,
    /// Requests failed by a reset (already re-issued once, or the timed-out one).
    pub reset_failed: u64,
    /// Interrupt handler calls that stopped at their work bound with entries left.
    pub budget_exhausted: u64,
}

#[derive(Default)]
struct Counters {
    completions: AtomicU64,
    bogus_cqes: AtomicU64,
    errors: AtomicU64,
    error_retries: AtomicU64,
    aborts_sent: AtomicU64,
    aborts_succeeded: AtomicU64,
    resets: AtomicU64,
    resets_failed: AtomicU64,
    reset_reissued: AtomicU64,
    reset_failed: AtomicU64,
    budget_exhausted: AtomicU64,
}

fn bump(c: &AtomicU64) -> u64 {
    c.fetch_add(1, Ordering::Relaxed) + 1
}

/// Controller state.
const STATE_LIVE: u8 = 0;
const STATE_RESETTING: u8 = 1;
const STATE_FAILED: u8 = 2;

/// The admin queue pair and its identify buffer.
struct Admin {
    sq: DmaBuf,
    cq: DmaBuf,
    buf: DmaBuf,
    entries: u32,
    tail: u32,
    head: u32,
    phase: bool,
    next_cid: u16,
    /// An admin command timed out: the device may still own `buf`; reset before reuse.
    stuck: bool,
}

/// A command posted on an I/O submission queue.
#[derive(Clone, Copy, Debug, Default)]
struct CmdSlot {
    outstanding: bool,
    /// The CID posted: the slot index in the low bits, a per-slot sequence number above, so a
    /// stale or duplicated completion of an earlier use of the slot does not match.
    cid: u16,
    /// Block-layer generation the request was issued with.
    generation: u16,
    /// The command as posted (for re-posting after an error).
    cmd: IoCmd,
    /// Re-posts after errors without DNR.
    retries: u8,
    /// This use of the slot is a request a controller reset handed back to the block layer
    /// (which dispatched it again): the next reset fails it instead of handing it back again.
    reissued_by_reset: bool,
    /// A reset handed this command back (not outstanding; blk requeues it with a fresh
    /// deadline). The next `post` of the slot is that request again and inherits
    /// `reissued_by_reset`; cleared by [`Controller::forget_handed_back`] if blk refuses.
    handed_back: bool,
    /// 0: not timed out; 1: abort sent.
    timeout_stage: u8,
    /// When the request was issued (the block layer's clock, which its deadline counts from;
    /// error retries keep it): the reset fails the aborted command issued first. A time, not a
    /// controller-wide sequence, which would be one locked increment of a line every CPU writes,
    /// per command.
    posted_ns: u64,
}

struct SqState {
    mem: DmaBuf,
    tail: u32,
    /// Last SQ head the controller reported.
    head: u32,
    /// Commands posted since the tail doorbell was last rung (a burst's deferred doorbell).
    unrung: u32,
    slots: Vec<CmdSlot>,
}

struct CqState {
    mem: DmaBuf,
    head: u32,
    phase: bool,
}

/// One I/O queue pair (SQ `qid` bound to CQ `qid`).
pub(crate) struct IoQueue {
    qid: u16,
    vector: u16,
    ien: bool,
    entries: u32,
    sq_doorbell: u32,
    cq_doorbell: u32,
    /// Bus addresses of the rings (fixed for the controller's life; the reset reuses them).
    sq_phys: u64,
    cq_phys: u64,
    sq: Mutex<SqState>,
    cq: Mutex<CqState>,
    /// I/O commands posted on this queue ([`Report::commands`] sums the queues). Written only
    /// under the SQ lock, so an increment needs no locked instruction; read without it.
    posted: AtomicU64,
    /// Per-CID PRP list pages (`list_stride` bytes per CID), owned by whoever holds the CID's
    /// block-layer tag.
    prp_lists: Option<DmaBuf>,
    list_stride: usize,
}

/// A completion the driver accepted, to be reported to the block layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Accepted {
    /// Command slot (namespace index × depth + tag).
    pub slot: u16,
    /// Generation the request was issued with.
    pub generation: u16,
    /// Final status.
    pub status: NvmeStatus,
}

/// Why a CQE was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BogusCqe {
    /// SQID is not the SQ bound to this CQ.
    WrongSq {
        /// Queue drained.
        cq: u16,
        /// SQID in the entry.
        sq_id: u16,
    },
    /// CID outside the SQ's command slots, or not outstanding (duplicate or invented).
    NotOutstanding {
        /// Queue.
        sq: u16,
        /// CID in the entry.
        cid: u16,
    },
    /// SQ head pointer not below the SQ size.
    BadSqHead {
        /// Queue.
        sq: u16,
        /// SQHD in the entry.
        sq_head: u16,
        /// Entries of the SQ.
        entries: u32,
    },
}

/// Result of posting an I/O command.
#[derive(Debug, PartialEq, Eq)]
pub enum PostError {
    /// No room in the SQ, or the controller is being reset: try again later.
    Busy,
    /// The controller failed or the command cannot be built.
    Failed(Error),
}

/// What a timeout handler should tell the block layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeoutVerdict {
    /// Keep waiting (abort sent, or the command already completed / was re-issued).
    Wait,
    /// The controller was reset: the device no longer owns the command; fail it.
    Failed,
}

/// What a reset did with the commands in flight.
#[derive(Debug, Default)]
pub struct ResetOutcome {
    /// (hardware queue, command slot, generation) of commands failed by the reset.
    pub failed: Vec<(usize, u16, u16)>,
    /// (hardware queue, command slot, generation) of commands handed back for re-issue: the
    /// caller requeues each through the block layer (`Queue::requeue`), which dispatches it
    /// again with a new generation and a fresh deadline.
    pub handed_back: Vec<(usize, u16, u16)>,
    /// Commands handed back (`handed_back.len()`).
    pub reissued: usize,
    /// The command the reset failed as the timed-out one (hardware queue, slot, generation):
    /// of the commands already aborted once, the one posted first (see [`Controller::reset`]).
    pub culprit: Option<(usize, u16, u16)>,
    /// Whether the controller came back.
    pub ok: bool,
}

/// An NVMe controller.
pub struct Controller<M: Mmio, D: Dma, T: Delay> {
    mmio: M,
    dma: D,
    delay: T,
    config: Config,
    cap: Cap,
    info: ControllerInfo,
    namespaces: Vec<NamespaceInfo>,
    max_io_queues: u16,
    max_transfer: u64,
    admin: Mutex<Admin>,
    io: Vec<IoQueue>,
    /// Command slots per SQ: namespaces × queue depth, then `floor_slots`.
    cids_per_sq: u32,
    /// Slots at the end of each SQ's that only the floor uses (no PRP list page).
    floor_slots: u32,
    /// The CID bits that hold the slot index (low bits set); the bits above hold a per-slot
    /// sequence number.
    index_mask: u16,
    queue_depth: u32,
    state: AtomicU8,
    reset_lock: Mutex<()>,
    counters: Counters,
    log_budget: AtomicU64,
    queues_created: AtomicBool,
}

impl<M: Mmio, D: Dma, T: Delay> Controller<M, D, T> {
    /// Takes the controller over from whatever state firmware left it in (disable, wait RDY=0,
    /// program the admin queue, enable, wait RDY=1), identifies it and its namespaces, and asks
    /// for `config.requested_io_queues` I/O queue pairs. No I/O queue exists yet: build a
    /// [`QueuePlan`] from [`Controller::max_io_queues`], program MSI-X, then call
    /// [`Controller::create_io_queues`] (done by `blkdev::Host::new`).
    pub fn new(mmio: M, dma: D, delay: T, config: Config) -> Result<Self, Error> {
        if !(2..=4096).contains(&config.admin_entries) {
            return Err(Error::InvalidConfig {
                field: "admin_entries",
                value: config.admin_entries.into(),
                accepted: "2..=4096",
            });
        }
        if config.requested_io_queues == 0 || config.requested_io_queues == u16::MAX {
            return Err(Error::InvalidConfig {
                field: "requested_io_queues",
                value: config.requested_io_queues.into(),
                accepted: "1..=65534",
            });
        }
        if config.floor_slots > 1024 {
            return Err(Error::InvalidConfig {
                field: "floor_slots",
                value: config.floor_slots.into(),
                accepted: "0..=1024",
            });
        }
        if config.doorbell_batch == 0 {
            return Err(Error::InvalidConfig {
                field: "doorbell_batch",
                value: 0,
                accepted: "1 or more commands per doorbell",
            });
        }
        if config.queue_depth == 0 || config.poll_us == 0 {
            return Err(Error::InvalidConfig {
                field: "queue_depth/poll_us",
                value: 0,
                accepted: "non-zero",
            });
        }
        let cap = Cap(read64(&mmio, regs::CAP));
        cap.validate()?;
        let entries = config.admin_entries.min(cap.max_queue_entries());
        let admin = Admin {
            sq: DmaBuf::alloc(&dma, entries as usize * SQE_SIZE, PAGE_SIZE)?,
            cq: DmaBuf::alloc(&dma, entries as usize * CQE_SIZE, PAGE_SIZE)?,
            buf: DmaBuf::alloc(&dma, PAGE_SIZE, PAGE_SIZE)?,
            entries,
            tail: 0,
            head: 0,
            phase: true,
            next_cid: 0,
            stuck: false,
        };
        let mut ctrl = Self {
            mmio,
            dma,
            delay,
            config,
            cap,
            info: ControllerInfo {
                vid: 0,
                serial: Default::default(),
                model: Default::default(),
                firmware: Default::default(),
                mdts: 0,
                nn: 0,
                volatile_cache: false,
                dataset_management: false,
            },
            namespaces: Vec::new(),
            max_io_queues: 0,
            max_transfer: config.max_transfer_bytes,
            admin: Mutex::new(admin),
            io: Vec::new(),
            cids_per_sq: 0,
            floor_slots: 0,
            index_mask: u16::MAX,
            queue_depth: 0,
            state: AtomicU8::new(STATE_LIVE),
            reset_lock: Mutex::new(()),
            counters: Counters::default(),
            log_budget: AtomicU64::new(16),
            queues_created: AtomicBool::new(false),
        };
        {
            let mut a = ctrl.admin.lock();
            // Firmware (SeaBIOS's NVMe boot support) may hand over a running controller with
            // queues of its own: say so, since taking it over is a path of its own.
            let cc = ctrl.mmio.read32(regs::CC);
            if cc != u32::MAX && cc & regs::CC_EN != 0 {
                log::info!("nvme: firmware left the controller enabled (CC={cc:#x}); disabling it before taking over");
            }
            ctrl.disable()?;
            ctrl.enable_admin(&mut a)?;
            ctrl.info = ctrl.identify_controller(&mut a)?;
            if ctrl.info.mdts != 0 {
                let mdts_bytes = (PAGE_SIZE as u64) << ctrl.info.mdts.min(40);
                ctrl.max_transfer = ctrl.max_transfer.min(mdts_bytes);
            }
            ctrl.namespaces = ctrl.identify_namespaces(&mut a)?;
            ctrl.max_io_queues = ctrl.set_number_of_queues(&mut a, config.requested_io_queues)?;
        }
        log::info!(
            "nvme: {} {} fw {} ({:#06x}): {} namespace(s), {} I/O queue pair(s) granted, max transfer {} KiB, MQES {}",
            ctrl.info.model,
            ctrl.info.serial,
            ctrl.info.firmware,
            ctrl.info.vid,
            ctrl.namespaces.len(),
            ctrl.max_io_queues,
            ctrl.max_transfer / 1024,
            cap.max_queue_entries()
        );
        Ok(ctrl)
    }

    /// CAP.
    pub fn cap(&self) -> Cap {
        self.cap
    }
    /// Identify Controller facts.
    pub fn info(&self) -> &ControllerInfo {
        &self.info
    }
    /// Active namespaces, in NSID order (those with metadata-carrying formats are skipped).
    pub fn namespaces(&self) -> &[NamespaceInfo] {
        &self.namespaces
    }
    /// I/O queue pairs the controller granted (`min(NSQA, NCQA) + 1`, capped by the request).
    pub fn max_io_queues(&self) -> u16 {
        self.max_io_queues
    }
    /// Largest transfer in bytes.
    pub fn max_transfer(&self) -> u64 {
        self.max_transfer
    }
    /// Block-layer tags per namespace per hardware queue (after the SQ-size cap).
    pub fn queue_depth(&self) -> u32 {
        self.queue_depth
    }
    /// Number of I/O queue pairs created.
    pub fn nr_io_queues(&self) -> usize {
        self.io.len()
    }
    /// The config.
    pub fn config(&self) -> &Config {
        &self.config
    }
    /// Whether the controller has failed for good (a reset did not bring it back).
    pub fn failed(&self) -> bool {
        self.state.load(Ordering::Acquire) == STATE_FAILED
    }
    /// Bus addresses of I/O queue `hwq`'s submission and completion rings (`None` for a queue
    /// that does not exist).
    pub fn io_queue_rings(&self, hwq: usize) -> Option<(u64, u64)> {
        self.io.get(hwq).map(|q| (q.sq_phys, q.cq_phys))
    }
    /// Entries of each I/O queue.
    pub fn io_queue_entries(&self) -> u32 {
        self.io.first().map_or(0, |q| q.entries)
    }

    /// The counters.
    pub fn report(&self) -> Report {
        let c = &self.counters;
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Report {
            commands: self.io.iter().map(|q| r(&q.posted)).sum(),
            completions: r(&c.completions),
            bogus_cqes: r(&c.bogus_cqes),
            errors: r(&c.errors),
            error_retries: r(&c.error_retries),
            aborts_sent: r(&c.aborts_sent),
            aborts_succeeded: r(&c.aborts_succeeded),
            resets: r(&c.resets),
            resets_failed: r(&c.resets_failed),
            reset_reissued: r(&c.reset_reissued),
            reset_failed: r(&c.reset_failed),
            budget_exhausted: r(&c.budget_exhausted),
        }
    }

    // ------------------------------------------------------------------ bring-up

    fn csts(&self) -> Csts {
        Csts(self.mmio.read32(regs::CSTS))
    }

    /// Waits for CSTS.RDY == `want` within CAP.TO.
    fn wait_ready(&self, want: bool) -> Result<(), Error> {
        let limit_us = self.cap.timeout_ms() * 1000;
        let mut waited = 0u64;
        loop {
            let csts = self.csts();
            if csts.gone() {
                return Err(Error::DeviceGone);
            }
            if csts.ready() == want {
                return Ok(());
            }
            if want && csts.fatal() {
                return Err(Error::ControllerFatal { csts: csts.0 });
            }
            if waited >= limit_us {
                return Err(Error::ReadyTimeout {
                    want,
                    waited_ms: waited / 1000,
                    csts: csts.0,
                });
            }
            self.delay.delay_us(self.config.poll_us);
            waited += u64::from(self.config.poll_us);
        }
    }

    /// CC.EN = 0 and wait for RDY = 0 (also clears CFS). If the firmware left EN = 0 with RDY
    /// still 1 (a disable in progress), wait for that too.
    fn disable(&self) -> Result<(), Error> {
        let cc = self.mmio.read32(regs::CC);
        if cc == u32::MAX {
            return Err(Error::DeviceGone);
        }
        if cc & regs::CC_EN != 0 {
            // Clear a shutdown request too; EN=0 is never combined with setting SHN (QEMU's
            // reset path then drops SHST).
            self.mmio.write32(regs::CC, cc & !(regs::CC_EN | 3 << 14));
        } else if !self.csts().ready() {
            return Ok(());
        }
        self.wait_ready(false)
    }

    /// Programs AQA/ASQ/ACQ (the admin memory zeroed) and enables the controller.
    fn enable_admin(&self, a: &mut Admin) -> Result<(), Error> {
        a.sq.zero();
        a.cq.zero();
        a.tail = 0;
        a.head = 0;
        a.phase = true;
        a.stuck = false;
        self.mmio.write32(regs::AQA, regs::aqa(a.entries, a.entries));
        write64(&self.mmio, regs::ASQ, a.sq.phys());
        write64(&self.mmio, regs::ACQ, a.cq.phys());
        self.mmio.write32(regs::CC, regs::CC_ENABLE);
        self.wait_ready(true)
    }

    // ------------------------------------------------------------------ admin queue

    /// Posts one admin command and polls for its completion. Returns DW0.
    fn admin_cmd(&self, a: &mut Admin, mut sqe: Sqe) -> Result<u32, Error> {
        if a.stuck {
            return Err(Error::NotOperational);
        }
        let cid = a.next_cid;
        a.next_cid = a.next_cid.wrapping_add(1);
        sqe.set_cid(cid);
        let opcode = sqe.opcode();
        write_sqe(&a.sq, a.tail, &sqe);
        a.tail = (a.tail + 1) % a.entries;
        // Release: the entry is in memory before the doorbell store makes the device read it.
        fence(Ordering::Release);
        self.mmio.write32(regs::DOORBELL_BASE, a.tail);
        let limit = self.config.admin_timeout_us;
        let mut waited = 0u64;
        loop {
            if let Some(cqe) = read_cqe(&a.cq, a.head, a.phase) {
                a.head += 1;
                if a.head == a.entries {
                    a.head = 0;
                    a.phase = !a.phase;
                }
                self.mmio.write32(self.cap.doorbell(0, true).unwrap_or(0x1004), a.head);
                if cqe.sq_id != 0 || cqe.cid != cid || u32::from(cqe.sq_head) >= a.entries {
                    self.count_bogus(0, BogusCqe::NotOutstanding { sq: 0, cid: cqe.cid });
                    continue;
                }
                let status = NvmeStatus(cqe.status);
                if !status.is_success() {
                    return Err(Error::AdminFailed { opcode, status });
                }
                return Ok(cqe.result);
            }
            if waited >= limit {
                a.stuck = true;
                let csts = self.csts();
                if csts.gone() {
                    return Err(Error::DeviceGone);
                }
                if csts.fatal() {
                    return Err(Error::ControllerFatal { csts: csts.0 });
                }
                return Err(Error::AdminTimeout {
                    opcode,
                    waited_us: waited,
                });
            }
            self.delay.delay_us(self.config.poll_us);
            waited += u64::from(self.config.poll_us);
        }
    }

    fn identify_controller(&self, a: &mut Admin) -> Result<ControllerInfo, Error> {
        a.buf.zero();
        let phys = a.buf.phys();
        self.admin_cmd(a, Sqe::identify(0, cns::CONTROLLER, 0, phys))?;
        let text = |from: usize, to: usize| -> alloc::string::String {
            let bytes: Vec<u8> = (from..to).map(|i| a.buf.read_u8(i)).collect();
            alloc::string::String::from_utf8_lossy(&bytes).trim().into()
        };
        let info = ControllerInfo {
            vid: a.buf.read_u32(0) as u16,
            serial: text(4, 24),
            model: text(24, 64),
            firmware: text(64, 72),
            mdts: a.buf.read_u8(77),
            nn: a.buf.read_u32(516),
            volatile_cache: a.buf.read_u8(525) & 1 != 0,
            // ONCS, bytes 520..522.
            dataset_management: a.buf.read_u16(520) & (1 << 2) != 0,
        };
        // Entry sizes: the driver uses 64/16 bytes; the controller must allow them.
        let sqes = a.buf.read_u8(512);
        let cqes = a.buf.read_u8(513);
        if (sqes & 0xF) > 6 || (sqes >> 4) < 6 || (cqes & 0xF) > 4 || (cqes >> 4) < 4 {
            return Err(Error::BadIdentify {
                field: "SQES/CQES",
                value: u64::from(sqes) << 8 | u64::from(cqes),
            });
        }
        Ok(info)
    }

    fn identify_namespaces(&self, a: &mut Admin) -> Result<Vec<NamespaceInfo>, Error> {
        a.buf.zero();
        let phys = a.buf.phys();
        self.admin_cmd(a, Sqe::identify(0, cns::ACTIVE_NS_LIST, 0, phys))?;
        let mut ids = Vec::new();
        for i in 0..PAGE_SIZE / 4 {
            let id = a.buf.read_u32(i * 4);
            if id == 0 {
                break;
            }
            // The list is increasing; anything else is a device bug, not to be trusted.
            if ids.last().is_some_and(|&last| id <= last) || id == u32::MAX {
                return Err(Error::BadIdentify {
                    field: "active namespace list",
                    value: id.into(),
                });
            }
            ids.push(id);
        }
        let mut out = Vec::new();
        for nsid in ids {
            a.buf.zero();
            self.admin_cmd(a, Sqe::identify(0, cns::NAMESPACE, nsid, phys))?;
            let nsze = a.buf.read_u64(0);
            if nsze == 0 {
                continue;
            }
            let nlbaf = a.buf.read_u8(25);
            let flbas = a.buf.read_u8(26) & 0xF;
            if flbas > nlbaf {
                return Err(Error::BadIdentify {
                    field: "FLBAS",
                    value: flbas.into(),
                });
            }
            let lbaf = a.buf.read_u32(128 + 4 * usize::from(flbas));
            let ms = lbaf & 0xFFFF;
            let lbads = (lbaf >> 16) & 0xFF;
            if ms != 0 {
                log::warn!("nvme: namespace {nsid} uses {ms} bytes of metadata per block; not supported, skipped");
                continue;
            }
            if !(9..=16).contains(&lbads) {
                return Err(Error::BadIdentify {
                    field: "LBADS",
                    value: lbads.into(),
                });
            }
            let lba_size = 1u32 << lbads;
            // The block layer counts 512-byte sectors in a u64: refuse sizes that overflow it.
            if nsze.checked_mul(u64::from(lba_size)).is_none() {
                return Err(Error::BadIdentify {
                    field: "NSZE",
                    value: nsze,
                });
            }
            let max_transfer = self.max_transfer.min(u64::from(lba_size) << 16);
            out.push(NamespaceInfo {
                nsid,
                lba_size,
                blocks: nsze,
                max_transfer,
            });
        }
        if out.is_empty() {
            return Err(Error::NoNamespaces);
        }
        Ok(out)
    }

    /// Set Features Number of Queues; returns `min(NSQA, NCQA) + 1` capped by `want`.
    fn set_number_of_queues(&self, a: &mut Admin, want: u16) -> Result<u16, Error> {
        let dw0 = self.admin_cmd(a, Sqe::set_number_of_queues(0, want, want))?;
        let nsqa = (dw0 & 0xFFFF) as u16;
        let ncqa = (dw0 >> 16) as u16;
        Ok(want.min(nsqa.saturating_add(1)).min(ncqa.saturating_add(1)))
    }

    // ------------------------------------------------------------------ I/O queues

    /// Creates one I/O queue pair per hardware queue of `plan` (CQ `q` on the plan's vector,
    /// IEN = 0 for polled plans, then SQ `q`), with `nr_namespaces × depth` command slots each.
    /// Program and enable MSI-X before calling this.
    pub fn create_io_queues(&mut self, plan: &QueuePlan, nr_namespaces: usize) -> Result<(), Error> {
        if !self.io.is_empty() || self.queues_created.load(Ordering::Relaxed) {
            return Err(Error::InvalidConfig {
                field: "create_io_queues",
                value: self.io.len() as u64,
                accepted: "called once",
            });
        }
        let n = plan.nr_io_queues();
        if n == 0 || n > usize::from(self.max_io_queues) {
            return Err(Error::InvalidConfig {
                field: "plan I/O queues",
                value: n as u64,
                accepted: "1..=granted queues",
            });
        }
        if nr_namespaces == 0 {
            return Err(Error::NoNamespaces);
        }
        // SQ entries = every CID outstanding at once plus the one slot a full ring leaves empty;
        // CQ the same, so a CQ can never overflow.
        let max_entries = self.cap.max_queue_entries().min(65536);
        // The floor's slots take at most half of what the device allows.
        let floor_slots = self.config.floor_slots.min((max_entries - 1) / 2);
        let depth = self
            .config
            .queue_depth
            .min((max_entries - 1 - floor_slots) / nr_namespaces as u32)
            .min((65535 - floor_slots) / nr_namespaces as u32);
        if depth == 0 {
            return Err(Error::InvalidConfig {
                field: "namespaces per controller",
                value: nr_namespaces as u64,
                accepted: "at most CAP.MQES",
            });
        }
        let blk_cids = depth * nr_namespaces as u32;
        let cids = blk_cids + floor_slots;
        let entries = cids + 1;
        // Dataset Management's range list lives in the slot's list page: at least one page
        // when the controller has the command.
        let list_pages = prp::list_pages_needed(self.max_transfer).max(usize::from(self.info.dataset_management));
        let list_stride = list_pages * PAGE_SIZE;
        let mut queues = Vec::with_capacity(n);
        for hwq in 0..n {
            let qid = (hwq + 1) as u16;
            // The queue's rings and PRP lists go near the first CPU that submits to it.
            let owner = (0..plan.ncpus()).find(|&cpu| plan.hwq_of_cpu(cpu) == Some(hwq));
            let bad_db = Error::Unsupported {
                what: "doorbell offset beyond 32 bits",
                value: qid.into(),
            };
            let sq_doorbell = self.cap.doorbell(qid, false).ok_or(bad_db.clone())?;
            let cq_doorbell = self.cap.doorbell(qid, true).ok_or(bad_db)?;
            let prp_lists = if list_stride == 0 {
                None
            } else {
                Some(DmaBuf::alloc_for_cpu(
                    &self.dma,
                    list_stride * blk_cids as usize,
                    PAGE_SIZE,
                    owner,
                )?)
            };
            let sq_mem = DmaBuf::alloc_for_cpu(&self.dma, entries as usize * SQE_SIZE, PAGE_SIZE, owner)?;
            let cq_mem = DmaBuf::alloc_for_cpu(&self.dma, entries as usize * CQE_SIZE, PAGE_SIZE, owner)?;
            queues.push(IoQueue {
                qid,
                sq_phys: sq_mem.phys(),
                cq_phys: cq_mem.phys(),
                vector: plan.vector_of_hwq(hwq).unwrap_or(0),
                ien: plan.interrupts_enabled(),
                entries,
                sq_doorbell,
                cq_doorbell,
                sq: Mutex::new(SqState {
                    mem: sq_mem,
                    tail: 0,
                    head: 0,
                    unrung: 0,
                    slots: vec![CmdSlot::default(); cids as usize],
                }),
                cq: Mutex::new(CqState {
                    mem: cq_mem,
                    head: 0,
                    phase: true,
                }),
                posted: AtomicU64::new(0),
                prp_lists,
                list_stride,
            });
        }
        self.io = queues;
        self.cids_per_sq = cids;
        self.floor_slots = floor_slots;
        // One bit more than the largest index needs, so index `cids` is always out of range.
        let index_bits = (32 - cids.leading_zeros()).min(16);
        self.index_mask = ((1u32 << index_bits) - 1) as u16;
        self.queue_depth = depth;
        let mut a = self.admin.lock();
        self.create_queues_on_device(&mut a)?;
        self.queues_created.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// Creates every I/O CQ and SQ on the device. Takes no queue lock (the reset holds them).
    fn create_queues_on_device(&self, a: &mut Admin) -> Result<(), Error> {
        for q in &self.io {
            let iv = if q.ien { q.vector } else { 0 };
            self.admin_cmd(a, Sqe::create_cq(0, q.qid, q.entries, q.cq_phys, iv, q.ien))?;
            self.admin_cmd(a, Sqe::create_sq(0, q.qid, q.entries, q.sq_phys, q.qid))?;
        }
        Ok(())
    }

    fn queue(&self, hwq: usize) -> Option<&IoQueue> {
        self.io.get(hwq)
    }

    /// The interrupt vector of hardware queue `hwq`.
    pub fn vector_of(&self, hwq: usize) -> Option<u16> {
        self.queue(hwq).filter(|q| q.ien).map(|q| q.vector)
    }

    // ------------------------------------------------------------------ I/O submission

    /// PRP list memory of command slot `slot` on `hwq`: (slice, bus address).
    ///
    /// # Safety
    /// The caller holds the block-layer tag that `slot` stands for on `hwq`, so nobody else
    /// uses this list, and the command using it is not in flight.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn prp_list(&self, hwq: usize, slot: u16) -> (&mut [u64], u64) {
        match self.queue(hwq).and_then(|q| q.prp_lists.as_ref().map(|l| (q, l))) {
            Some((q, lists)) if u32::from(slot) < self.cids_per_sq - self.floor_slots => {
                let off = usize::from(slot) * q.list_stride;
                // SAFETY: the caller's promise; in bounds since the lists cover every slot
                // below the floor's.
                let slice = unsafe { lists.u64_slice(off, q.list_stride / 8) };
                (slice, lists.phys() + off as u64)
            }
            _ => (&mut [], 0),
        }
    }

    /// Posts `cmd` for command slot `slot` on hardware queue `hwq` (the CID is set here).
    /// `issue(request)` runs under the SQ lock once the command is sure to be posted, and returns
    /// the block-layer generation and the issue time (the reset's order), so a completion can
    /// never arrive for a request the block layer has not yet marked issued; a post that fails
    /// gives `request` back with the error
    /// (moved by value, not through an `Option` the closure takes it from). Rings the
    /// doorbell unless `defer_doorbell`.
    pub(crate) fn post<R>(
        &self,
        hwq: usize,
        slot: u16,
        mut cmd: IoCmd,
        defer_doorbell: bool,
        request: R,
        issue: impl FnOnce(R) -> (u16, u64),
    ) -> Result<(), (PostError, R)> {
        let Some(q) = self.queue(hwq) else {
            return Err((
                PostError::Failed(Error::InvalidConfig {
                    field: "hwq",
                    value: hwq as u64,
                    accepted: "an existing I/O queue",
                }),
                request,
            ));
        };
        let index = usize::from(slot);
        let mut guard = q.sq.lock();
        let sq = &mut *guard;
        // Checked once, under the lock (not also before it): a reset holds every SQ lock while it
        // runs, so the state cannot change between this check and the post.
        let state = self.state.load(Ordering::Acquire);
        if state != STATE_LIVE {
            return Err((not_live(state), request));
        }
        // The slot's record, bounds-checked once for the whole post, not indexed and
        // checked at each use.
        let Some(record) = sq.slots.get_mut(index).filter(|r| !r.outstanding) else {
            return Err((
                PostError::Failed(Error::InvalidConfig {
                    field: "command slot",
                    value: slot.into(),
                    accepted: "a free command slot",
                }),
                request,
            ));
        };
        let cid = self.next_cid(record.cid, slot);
        cmd.set_cid(cid);
        // Full when the tail would catch up with the head: the same test as `ring_free(..) == 0`
        // (one entry is always left empty; `drain` accepts only an SQ head below the queue size),
        // without computing the count.
        let tail = sq.tail;
        let next_tail = next_index(tail, q.entries);
        if next_tail == sq.head {
            return Err((PostError::Busy, request));
        }
        // The entry and the slot's copy of the command go out from registers before `issue`
        // (whose calls would make the compiler keep them on the stack). The device
        // reads the entry only once the tail passes it, below, after `issue`.
        write_cmd(&sq.mem, tail, &cmd);
        record.cmd = cmd;
        let (generation, posted_ns) = issue(request);
        // Only SQ lock holders write it: a plain increment.
        q.posted.store(q.posted.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        record.outstanding = true;
        record.cid = cid;
        record.generation = generation;
        record.retries = 0;
        record.reissued_by_reset = record.handed_back;
        record.handed_back = false;
        record.timeout_stage = 0;
        record.posted_ns = posted_ns;
        sq.tail = next_tail;
        // A deferred doorbell is rung anyway once `doorbell_batch` commands wait behind it, so
        // the device works on them while the rest of the burst is built (one
        // doorbell per 32-command burst would put device and CPU in lock-step).
        sq.unrung += 1;
        if !defer_doorbell || sq.unrung >= self.config.doorbell_batch {
            self.ring_sq(q, sq);
        }
        Ok(())
    }

    fn ring_sq(&self, q: &IoQueue, sq: &mut SqState) {
        // Release: the entries are in memory before the doorbell store makes the device read them.
        fence(Ordering::Release);
        self.mmio.write32(q.sq_doorbell, sq.tail);
        sq.unrung = 0;
    }

    /// Rings hardware queue `hwq`'s SQ doorbell if commands were posted with it deferred.
    pub(crate) fn commit(&self, hwq: usize) {
        if let Some(q) = self.queue(hwq) {
            let mut sq = q.sq.lock();
            if sq.unrung > 0 {
                self.ring_sq(q, &mut sq);
            }
        }
    }

    // ------------------------------------------------------------------ completions

    /// Drains hardware queue `hwq`'s CQ: at most `budget` entries, stopping at the first phase
    /// mismatch; rings the CQ head doorbell once; validates every entry; re-posts commands that
    /// failed without DNR (up to `max_retries`); hands each accepted completion to `deliver`
    /// after all locks are released. Returns (accepted, entries left when the budget ran out).
    pub(crate) fn drain(&self, hwq: usize, budget: u32, mut deliver: impl FnMut(Accepted)) -> (usize, bool) {
        let Some(q) = self.queue(hwq) else {
            return (0, false);
        };
        const BATCH: usize = 32;
        let mut accepted_total = 0;
        let mut left = budget;
        loop {
            // The accepted completions, packed: `out[..accepted]` (no per-entry `Option` to
            // test when delivering).
            let mut out = [Accepted {
                slot: 0,
                generation: 0,
                status: NvmeStatus(0),
            }; BATCH];
            let mut accepted = 0;
            let mut n = 0;
            let more;
            {
                // Each entry is validated as it is read, under both locks, not copied
                // into a batch under the CQ lock and validated from it under the SQ lock. The SQ
                // lock first: the order `reset` takes them in.
                let mut guard = q.sq.lock();
                let sq = &mut *guard;
                let mut cq = q.cq.lock();
                let limit = BATCH.min(left as usize);
                let mut ring = false;
                while n < limit {
                    let Some(cqe) = read_io_cqe(&cq.mem, cq.head, cq.phase) else {
                        break;
                    };
                    n += 1;
                    cq.head = next_index(cq.head, q.entries);
                    if cq.head == 0 {
                        cq.phase = !cq.phase;
                    }
                    // The slot's record as `validate` found it, not indexed and
                    // bounds-checked again here.
                    match self.validate(q, &mut sq.slots, &cqe) {
                        Err(why) => self.count_bogus(q.qid, why),
                        Ok((index, slot)) => {
                            sq.head = u32::from(cqe.sq_head);
                            let status = NvmeStatus(cqe.status);
                            if !status.is_success() {
                                bump(&self.counters.errors);
                                // Not a command being aborted by a timeout, nor one the
                                // controller aborted: those end with their status.
                                let aborted =
                                    matches!(status.kind(), StatusKind::AbortRequested | StatusKind::AbortedSqDeleted);
                                if status.retryable()
                                    && !aborted
                                    && slot.timeout_stage == 0
                                    && slot.retries < self.config.max_retries
                                {
                                    slot.retries += 1;
                                    if ring_free(sq.tail, sq.head, q.entries) > 0 {
                                        // A fresh CID, so a late copy of the failed entry
                                        // cannot complete the retry.
                                        slot.cid = self.next_cid(slot.cid, index as u16);
                                        slot.cmd.set_cid(slot.cid);
                                        let cmd = slot.cmd;
                                        bump(&self.counters.error_retries);
                                        write_cmd(&sq.mem, sq.tail, &cmd);
                                        advance_tail(sq, q.entries);
                                        ring = true;
                                        continue;
                                    }
                                }
                            }
                            slot.outstanding = false;
                            out[accepted] = Accepted {
                                slot: index as u16,
                                generation: slot.generation,
                                status,
                            };
                            accepted += 1;
                        }
                    }
                }
                if n > 0 {
                    // Entries are read before the head doorbell gives their slots back.
                    fence(Ordering::SeqCst);
                    self.mmio.write32(q.cq_doorbell, cq.head);
                }
                // Re-check once after the doorbell: an entry posted meanwhile is not re-signalled.
                more = read_io_cqe(&cq.mem, cq.head, cq.phase).is_some();
                drop(cq);
                if ring {
                    self.ring_sq(q, sq);
                }
            }
            left -= n as u32;
            if accepted > 0 {
                // One count per batch, not one locked add per completion.
                self.counters.completions.fetch_add(accepted as u64, Ordering::Relaxed);
            }
            accepted_total += accepted;
            for a in &out[..accepted] {
                deliver(*a);
            }
            if !more {
                return (accepted_total, false);
            }
            if left == 0 {
                bump(&self.counters.budget_exhausted);
                return (accepted_total, true);
            }
        }
    }

    /// Checks a CQE against the queue and its outstanding commands (`slots`, the SQ's command
    /// records); returns the slot index its CID names and the slot's record (so the caller
    /// neither decodes the CID nor indexes the records again).
    fn validate<'s>(
        &self,
        q: &IoQueue,
        slots: &'s mut [CmdSlot],
        cqe: &Cqe,
    ) -> Result<(usize, &'s mut CmdSlot), BogusCqe> {
        if cqe.sq_id != q.qid {
            return Err(BogusCqe::WrongSq {
                cq: q.qid,
                sq_id: cqe.sq_id,
            });
        }
        if u32::from(cqe.sq_head) >= q.entries {
            return Err(BogusCqe::BadSqHead {
                sq: q.qid,
                sq_head: cqe.sq_head,
                entries: q.entries,
            });
        }
        let index = self.slot_of(cqe.cid);
        match slots.get_mut(index) {
            Some(s) if s.outstanding && s.cid == cqe.cid => Ok((index, s)),
            _ => Err(BogusCqe::NotOutstanding {
                sq: q.qid,
                cid: cqe.cid,
            }),
        }
    }

    /// Counts a refused CQE and logs it, rate limited (the first 16, then every 1024th).
    fn count_bogus(&self, qid: u16, why: BogusCqe) {
        let n = bump(&self.counters.bogus_cqes);
        let within_budget = self
            .log_budget
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| b.checked_sub(1))
            .is_ok();
        if within_budget {
            log::warn!("nvme: queue {qid}: refused completion entry: {why:?} ({n} so far)");
        } else if n.is_multiple_of(1024) {
            log::warn!("nvme: {n} completion entries refused so far (latest on queue {qid}: {why:?})");
        }
    }

    // ------------------------------------------------------------------ recovery

    /// Handles the timeout of command slot `slot` (generation `generation`) on hardware queue `hwq`.
    /// First time: sends Abort and waits again (QEMU answers "not aborted"; a controller that
    /// does abort completes the command with Abort Requested through its CQ). Second time, or
    /// when the Abort itself fails or CSTS shows a fatal state: resets the controller, after which
    /// the device no longer owns the command. Returns the verdict and, after a reset, what the
    /// reset did with the other commands in flight (the caller fails or requeues those it
    /// lists); the verdict is `Failed` only if the reset failed this command.
    pub(crate) fn timeout(&self, hwq: usize, slot: u16, generation: u16) -> (TimeoutVerdict, Option<ResetOutcome>) {
        let Some(q) = self.queue(hwq) else {
            return (TimeoutVerdict::Wait, None);
        };
        let (stage, cid) = {
            let mut sq = q.sq.lock();
            match sq.slots.get_mut(usize::from(slot)) {
                Some(s) if s.outstanding && s.generation == generation => {
                    let stage = s.timeout_stage;
                    s.timeout_stage = stage.saturating_add(1);
                    (stage, s.cid)
                }
                // Completed (delivery on its way) or already dealt with: keep waiting for it.
                _ => return (TimeoutVerdict::Wait, None),
            }
        };
        let csts = self.csts();
        let broken = csts.gone() || csts.fatal() || self.failed();
        if stage == 0 && !broken {
            bump(&self.counters.aborts_sent);
            let result = {
                let mut a = self.admin.lock();
                self.admin_cmd(&mut a, Sqe::abort(0, q.qid, cid))
            };
            match result {
                Ok(dw0) => {
                    if dw0 & 1 == 0 {
                        bump(&self.counters.aborts_succeeded);
                        log::warn!("nvme: queue {} cid {cid} timed out; aborted", q.qid);
                    } else {
                        log::warn!(
                            "nvme: queue {} cid {cid} timed out; controller did not abort it, waiting once more before a reset",
                            q.qid
                        );
                    }
                    return (TimeoutVerdict::Wait, None);
                }
                Err(e) => log::warn!("nvme: abort of queue {} cid {cid} failed ({e}); resetting", q.qid),
            }
        }
        let outcome = self.reset(Some((hwq, slot)));
        // Failed only if this reset failed this command: it may have picked an older aborted
        // command as the culprit and handed this one back (blk requeues it: the handler waits),
        // and another CPU's reset may have handed it back before this one.
        if outcome.failed.iter().any(|&(h, s, _)| h == hwq && s == slot) {
            (TimeoutVerdict::Failed, Some(outcome))
        } else {
            (TimeoutVerdict::Wait, Some(outcome))
        }
    }

    /// Controller reset: CC.EN = 0, wait RDY = 0 (the device gives up every command), zero all
    /// queue memory, re-create the admin queue and the I/O queues. Every command in flight is
    /// handed back (`handed_back`: the caller requeues it through blk), except the culprit and
    /// commands a reset already handed back once, which are returned in `failed`.
    ///
    /// `trigger` is the timed-out command whose second expiry asked for the reset. The culprit
    /// is, of every command already aborted once (the trigger included), the one posted first:
    /// when one command holds up the device (a backend answering one read late), those posted
    /// after it often wait behind it and reach their second expiry in the same scan, and the
    /// scan's order says nothing about which one is stuck.
    ///
    /// When the controller does not come back it is marked failed; then every command is
    /// returned failed if the disable worked (the device let go), and kept (never handed back)
    /// if even the disable failed.
    pub(crate) fn reset(&self, trigger: Option<(usize, u16)>) -> ResetOutcome {
        let _serial = self.reset_lock.lock();
        self.state.store(STATE_RESETTING, Ordering::Release);
        bump(&self.counters.resets);
        let mut a = self.admin.lock();
        let mut sqs: Vec<_> = self.io.iter().map(|q| q.sq.lock()).collect();
        let mut cqs: Vec<_> = self.io.iter().map(|q| q.cq.lock()).collect();
        let mut outcome = ResetOutcome::default();
        // No SQ doorbell can be rung now (we hold every SQ lock). One admin round trip before
        // the disable makes the controller act on the doorbells already rung: QEMU 7.2 fetches
        // SQ entries later, in its main loop, and entries it fetches while the disable drains
        // the backend are parked by the drain and completed after the queues were freed (QEMU
        // segfaulted in the held-read scenario). Harmless elsewhere; skipped when the
        // controller is already broken.
        let csts = self.csts();
        if !(csts.gone() || csts.fatal()) {
            a.buf.zero();
            let phys = a.buf.phys();
            if let Err(e) = self.admin_cmd(&mut a, Sqe::identify(0, cns::CONTROLLER, 0, phys)) {
                log::warn!("nvme: reset: admin round trip before the disable failed ({e})");
            }
        }
        if let Err(e) = self.disable() {
            log::error!("nvme: reset: disable failed ({e}); commands stay with the device");
            bump(&self.counters.resets_failed);
            self.state.store(STATE_FAILED, Ordering::Release);
            return outcome;
        }
        // The device has let go of everything: zero the rings (a late entry may have landed).
        for (sq, cq) in sqs.iter_mut().zip(cqs.iter_mut()) {
            sq.mem.zero();
            sq.tail = 0;
            sq.head = 0;
            sq.unrung = 0;
            cq.mem.zero();
            cq.head = 0;
            cq.phase = true;
        }
        let back = self
            .enable_admin(&mut a)
            .and_then(|()| self.set_number_of_queues(&mut a, self.config.requested_io_queues))
            .and_then(|granted| {
                if usize::from(granted) < self.io.len() {
                    Err(Error::Unsupported {
                        what: "I/O queues granted after reset",
                        value: granted.into(),
                    })
                } else {
                    Ok(())
                }
            })
            .and_then(|()| self.create_queues_on_device(&mut a));
        outcome.ok = back.is_ok();
        let culprit = trigger.and_then(|_| {
            let mut oldest: Option<(u64, usize, u16)> = None;
            for (hwq, sq) in sqs.iter().enumerate() {
                for (cid, s) in sq.slots.iter().enumerate() {
                    if s.outstanding && s.timeout_stage > 0 && oldest.is_none_or(|(at, _, _)| s.posted_ns < at) {
                        oldest = Some((s.posted_ns, hwq, cid as u16));
                    }
                }
            }
            oldest.map(|(_, hwq, cid)| (hwq, cid)).or(trigger)
        });
        if let Err(e) = &back {
            log::error!("nvme: reset: controller did not come back ({e}); failing every command");
            bump(&self.counters.resets_failed);
        }
        // Nothing is re-posted here: a command handed back goes through the block layer again
        // (`Queue::requeue`, done by the caller once no lock is held), which gives it a new
        // generation and a fresh deadline, and the driver a fresh slot state (timeout stage 0).
        // Re-posting it here would keep the deadline it had before the reset, which may have
        // passed during the reset: it would be aborted at once and a second reset would fail
        // it and every other re-posted command.
        for (hwq, sq) in sqs.iter_mut().enumerate() {
            for cid in 0..sq.slots.len() {
                let slot = sq.slots[cid];
                if !slot.outstanding {
                    continue;
                }
                let is_culprit = culprit == Some((hwq, cid as u16));
                let s = &mut sq.slots[cid];
                s.outstanding = false;
                if is_culprit {
                    outcome.culprit = Some((hwq, cid as u16, slot.generation));
                }
                if !outcome.ok || is_culprit || slot.reissued_by_reset {
                    outcome.failed.push((hwq, cid as u16, slot.generation));
                    bump(&self.counters.reset_failed);
                } else {
                    s.handed_back = true;
                    outcome.handed_back.push((hwq, cid as u16, slot.generation));
                    bump(&self.counters.reset_reissued);
                }
            }
        }
        outcome.reissued = outcome.handed_back.len();
        self.state
            .store(if outcome.ok { STATE_LIVE } else { STATE_FAILED }, Ordering::Release);
        log::warn!(
            "nvme: controller reset {}: {} command(s) re-issued, {} failed",
            if outcome.ok { "done" } else { "FAILED" },
            outcome.reissued,
            outcome.failed.len()
        );
        drop(cqs);
        drop(sqs);
        outcome
    }

    /// The block layer refused to requeue a command a reset handed back (it had ended some
    /// other way): the next use of the slot is a new request, not a re-issue.
    pub(crate) fn forget_handed_back(&self, hwq: usize, slot: u16) {
        if let Some(q) = self.queue(hwq) {
            let mut sq = q.sq.lock();
            if let Some(s) = sq.slots.get_mut(usize::from(slot))
                && !s.outstanding
            {
                s.handed_back = false;
            }
        }
    }

    /// Normal shutdown (CC.SHN = 01b; never together with EN = 0), waiting up to CAP.TO for
    /// SHST = complete.
    pub fn shutdown(&self) -> Result<(), Error> {
        let cc = self.mmio.read32(regs::CC);
        self.mmio.write32(regs::CC, (cc & !(3 << 14)) | regs::CC_SHN_NORMAL);
        let limit_us = self.cap.timeout_ms() * 1000;
        let mut waited = 0;
        while self.csts().shutdown_status() != 2 {
            if waited >= limit_us {
                return Err(Error::ReadyTimeout {
                    want: false,
                    waited_ms: waited / 1000,
                    csts: self.csts().0,
                });
            }
            self.delay.delay_us(self.config.poll_us);
            waited += u64::from(self.config.poll_us);
        }
        Ok(())
    }

    /// Command slots per I/O submission queue (the floor's included).
    pub fn cids_per_queue(&self) -> u32 {
        self.cids_per_sq
    }

    /// Slots per I/O queue kept for the floor: the last `floor_slots()` of `cids_per_queue()`.
    pub fn floor_slots(&self) -> u32 {
        self.floor_slots
    }

    /// Whether hardware queue `hwq`'s CQ holds an entry not yet reaped (a floor run's "news"
    /// before it halts). A CQ whose lock is held is being drained: counts as news.
    pub(crate) fn cq_pending(&self, hwq: usize) -> bool {
        self.queue(hwq).is_some_and(|q| {
            q.cq.try_lock()
                .is_none_or(|cq| read_io_cqe(&cq.mem, cq.head, cq.phase).is_some())
        })
    }

    /// The slot index a CID names (out of range for CIDs no slot can have).
    fn slot_of(&self, cid: u16) -> usize {
        usize::from(cid & self.index_mask)
    }

    /// The CID for the next use of `slot`, whose previous CID was `previous`: the sequence
    /// number above the index bits plus one (wrapping within its bits), then the slot index. One
    /// mask and one add (not two shifts by the field width and a test of it): the
    /// sequence's unit is `index_mask + 1`, 0 when the index takes all 16 bits.
    fn next_cid(&self, previous: u16, slot: u16) -> u16 {
        next_cid(self.index_mask, previous, slot)
    }
}

impl<M: Mmio, D: Dma, T: Delay> fmt::Debug for Controller<M, D, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Controller")
            .field("cap", &self.cap)
            .field("info", &self.info)
            .field("namespaces", &self.namespaces)
            .field("io_queues", &self.io.len())
            .field("report", &self.report())
            .finish()
    }
}

fn read64(mmio: &impl Mmio, off: u32) -> u64 {
    u64::from(mmio.read32(off)) | u64::from(mmio.read32(off + 4)) << 32
}

fn write64(mmio: &impl Mmio, off: u32, v: u64) {
    mmio.write32(off, v as u32);
    mmio.write32(off + 4, (v >> 32) as u32);
}

#[inline]
fn write_sqe(mem: &DmaBuf, slot: u32, sqe: &Sqe) {
    // One bounds check and 8 stores, not 16 checked word writes.
    mem.write_u32s(slot as usize * SQE_SIZE, &sqe.0);
}

/// Writes I/O command `cmd` into entry `slot` of an SQ: one bounds check and eight 8-byte stores
/// of the words composed in registers.
#[inline(always)]
fn write_cmd(mem: &DmaBuf, slot: u32, cmd: &IoCmd) {
    mem.write_u64s(slot as usize * SQE_SIZE, cmd.sqe_words());
}

/// Why a post found the controller not live (out of line: the hot path keeps one compare; issue
/// 22).
#[cold]
#[inline(never)]
fn not_live(state: u8) -> PostError {
    if state == STATE_RESETTING {
        PostError::Busy
    } else {
        PostError::Failed(Error::NotOperational)
    }
}

/// Moves an SQ's tail past the entry just written.
#[inline]
fn advance_tail(sq: &mut SqState, entries: u32) {
    sq.tail = next_index(sq.tail, entries);
}

/// [`Controller::next_cid`] for index bits `mask`.
#[inline]
fn next_cid(mask: u16, previous: u16, slot: u16) -> u16 {
    (previous & !mask).wrapping_add(mask.wrapping_add(1)) | slot
}

/// The ring index after `index` (below `entries`): a compare, not a division.
#[inline]
fn next_index(index: u32, entries: u32) -> u32 {
    if index + 1 == entries { 0 } else { index + 1 }
}

/// Free entries of a ring of `entries` (one always left empty) from producer `tail` and
/// consumer `head`, both below `entries`: a compare, not a division.
#[inline]
fn ring_free(tail: u32, head: u32, entries: u32) -> u32 {
    let used = if tail >= head {
        tail - head
    } else {
        tail + entries - head
    };
    entries - 1 - used
}

/// The CQE at `head` if its phase tag says the controller wrote it on this pass.
#[inline]
fn read_cqe(mem: &DmaBuf, head: u32, phase: bool) -> Option<Cqe> {
    read_cqe_words::<true>(mem, head, phase)
}

/// [`read_cqe`] for an I/O queue: DW0 (command specific, unused by reads, writes, flushes and
/// Dataset Management) and DW1 (reserved) are not read, so `result` is 0 (two loads
/// fewer per completion).
#[inline(always)]
fn read_io_cqe(mem: &DmaBuf, head: u32, phase: bool) -> Option<Cqe> {
    read_cqe_words::<false>(mem, head, phase)
}

/// The CQE at `head` if its phase tag matches `phase`; DW0 and DW1 only `WITH_RESULT`.
#[inline(always)]
fn read_cqe_words<const WITH_RESULT: bool>(mem: &DmaBuf, head: u32, phase: bool) -> Option<Cqe> {
    // One bounds check for the entry's four words.
    let entry = mem.word_run::<4>(head as usize * CQE_SIZE);
    let dw3 = entry.read(3);
    if (dw3 & (1 << 16) != 0) != phase {
        return None;
    }
    // Acquire: the rest of the entry is read only after its phase tag was seen.
    fence(Ordering::Acquire);
    let (dw0, dw1) = if WITH_RESULT {
        (entry.read(0), entry.read(1))
    } else {
        (0, 0)
    };
    Some(Cqe::from_dwords([dw0, dw1, entry.read(2), dw3]))
}

#[cfg(test)]
mod tests {
    use super::{next_cid, next_index, ring_free};

    #[test]
    fn next_cid_bumps_the_sequence_above_the_index_and_wraps_within_its_bits() {
        for bits in 1u32..=16 {
            let mask = ((1u32 << bits) - 1) as u16;
            for slot in [0u16, 1, mask / 2, mask] {
                for seq in [0u32, 1, 2, (1 << (16 - bits)) - 1] {
                    let previous = if bits == 16 { slot } else { (seq << bits) as u16 | slot };
                    // The shift form it replaced.
                    let expected = if bits >= 16 {
                        slot
                    } else {
                        let s = ((u32::from(previous) >> bits) + 1) & ((1 << (16 - bits)) - 1);
                        (s << bits) as u16 | slot
                    };
                    assert_eq!(next_cid(mask, previous, slot), expected, "{bits} {slot} {seq}");
                    assert_eq!(next_cid(mask, previous, slot) & mask, slot);
                }
            }
        }
        // 5 index bits: sequence 2047 wraps to 0.
        assert_eq!(next_cid(0x1F, 0xFFE3, 3), 3);
        assert_eq!(next_cid(0x1F, 0x0003, 3), 0x0023);
    }

    #[test]
    fn ring_free_is_the_modular_count() {
        for entries in [2u32, 5, 33, 1024] {
            for tail in 0..entries {
                for head in 0..entries {
                    let used = (tail + entries - head) % entries;
                    assert_eq!(
                        ring_free(tail, head, entries),
                        entries - 1 - used,
                        "{tail} {head} {entries}"
                    );
                    // `post`'s full test.
                    assert_eq!(
                        next_index(tail, entries) == head,
                        ring_free(tail, head, entries) == 0,
                        "{tail} {head} {entries}"
                    );
                }
            }
        }
        assert_eq!(ring_free(0, 0, 33), 32, "an empty ring leaves one entry unused");
        assert_eq!(ring_free(31, 0, 33), 1);
        assert_eq!(ring_free(4, 5, 33), 0, "full: tail just behind head");
    }
}
