//! The controller: bring-up from any state, the admin queue (polled), identify, I/O queue pairs,
//! command submission, completion-queue draining with validation, abort and controller reset.
//!
//! Locking: the admin queue, each submission queue and each completion queue have their own spin
//! lock. No path holds an SQ lock and a CQ lock at once, except the reset, which takes every lock
//! in one fixed order (admin, then each pair's SQ and CQ in queue order). Callers run with
//! interrupts disabled on their CPU (the kernel enters blk that way), so an interrupt handler
//! never spins on a lock its own CPU holds.
//!
//! One concept per file:
//! - `bringup`: taking the controller over from any state (disable, admin queue, enable),
//!   identify and the queue count at `new`, and the shutdown notification;
//! - `admin`: the polled admin queue and the admin commands (Identify, Set Features);
//! - `queues`: creating the I/O queue pairs, and the command slots' CIDs and ring arithmetic;
//! - `io`: posting commands on a submission queue, with its doorbell;
//! - `completion`: draining a completion queue and validating every entry;
//! - `reset`: the timeout ladder (Abort, then controller reset) and what a reset hands back.
//!
//! This file holds what they share: the types, the controller's state and its accessors.

mod admin;
mod bringup;
mod completion;
mod io;
mod queues;
mod reset;

use alloc::vec::Vec;
use core::fmt;
use core::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};

use spin::Mutex;

use crate::cmd::IoCmd;
use crate::regs::{CQE_SIZE, Cap, SQE_SIZE};
use crate::status::NvmeStatus;
use crate::{Delay, Dma, Error, Mmio};
use devhal::{DmaBuf, DmaRing};

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
    /// The CID posted (bits 0-15: the slot index in the low bits, a per-slot sequence number
    /// above, so a stale or duplicated completion of an earlier use of the slot does not match)
    /// and [`LIVE`] while the command is outstanding: a completion's CID is checked against both
    /// in one compare.
    live: u32,
    /// Block-layer generation the request was issued with.
    generation: u16,
    /// The command as posted (for re-posting after an error).
    cmd: IoCmd,
    /// The slot's per-use flags, in one word (a post resets them with one store).
    flags: SlotFlags,
    /// When the request was issued (the block layer's clock, which its deadline counts from;
    /// error retries keep it): the reset fails the aborted command issued first. A time, not a
    /// controller-wide sequence, which would be one locked increment of a line every CPU writes,
    /// per command.
    posted_ns: u64,
}

/// The flags of a [`CmdSlot`]'s use, packed so that a post writes them at once.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C, align(4))]
struct SlotFlags {
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
}

/// [`CmdSlot::live`]'s outstanding bit.
const LIVE: u32 = 1 << 16;

impl CmdSlot {
    /// The CID last posted.
    fn cid(&self) -> u16 {
        self.live as u16
    }
    /// Whether the command is with the device.
    fn outstanding(&self) -> bool {
        self.live & LIVE != 0
    }
    /// Marks the command posted as `cid` outstanding.
    fn set_live(&mut self, cid: u16) {
        self.live = u32::from(cid) | LIVE;
    }
    /// Marks the command ended (the CID stays, the next one follows its sequence number).
    fn end(&mut self) {
        self.live &= !LIVE;
    }
}

struct SqState {
    mem: DmaRing<SQE_SIZE>,
    tail: u32,
    /// Last SQ head the controller reported.
    head: u32,
    /// Commands posted since the tail doorbell was last rung (a burst's deferred doorbell).
    unrung: u32,
    slots: Vec<CmdSlot>,
}

struct CqState {
    mem: DmaRing<CQE_SIZE>,
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
