//! The controller: firmware bring-up, INIT, discovery, I/O submission and reply-queue reaping.
//!
//! One concept per file:
//! - `bringup`: the firmware to READY from whatever state it is in, the frame pool and reply
//!   ring sized from the firmware's limits, INIT, interrupts on, and `shutdown` back to READY;
//! - `discovery`: polled admin commands: the DCMDs (controller info, LD and PD lists, cache flush
//!   and shutdown) and READ CAPACITY, and the drive table discovery publishes for the I/O path;
//! - `io`: the submission gate, request validation, building and posting frames;
//! - `reply`: reaping the reply queue and validating what the device wrote;
//! - `reset`: ABORT, controller reset, and failing the commands in flight exactly once.
//!
//! This file holds what they share: the types, the controller's state and its accessors.

mod bringup;
mod discovery;
mod io;
mod reply;
mod reset;

use core::fmt;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use crate::Error;
use crate::dcmd::{self, ControllerInfo};
use crate::error::Fault;
use crate::frame::{self, FrameWriter};
use crate::gate::ReapGate;
use crate::model::Model;
use crate::regs::{FwState, FwStatus};
use crate::status::{IoError, IoStatus, MfiStatus};
use crate::tags::{self, TagTable};
use crate::{Delay, Dma, Mmio};
use devhal::DmaBuf;

pub use discovery::DriveTable;
pub use io::{CheckedLdIo, CheckedRequest, LdIo, SubmitGuard};

/// Bytes of sense buffer per tag (fixed-format sense is 18 bytes; room for descriptor format).
pub const SENSE_LEN: usize = 64;
/// Reply-queue sentinel written into consumed slots: its tag part is out of range for any table.
const RING_SENTINEL: u32 = 0xFFFF_FFFF;
/// Offsets inside the reply-queue region.
const RING_PI: usize = 0;
const RING_CI: usize = 4;
const RING_QINFO: usize = 64;
const RING_ENTRIES: usize = 128;
/// Size of the admin DMA buffer (CTRL_GET_INFO needs 2048).
const ADMIN_LEN: usize = 4096;
/// System PDs are kept by SCSI id below this (Linux puts PDs on channels 0-1, ids < 128 each).
pub const MAX_PD_TARGETS: usize = 128;
/// Lanes of the submission gate: CPUs past this many share lanes (a lane is 128 bytes).
pub const SUBMIT_LANES: usize = 64;

/// The tag reserved for admin commands: bring-up, discovery, INIT after a reset, and ABORT frames.
/// The block layer keeps it out of its I/O tags (`reserved_tags = 1`).
pub const ADMIN_TAG: u16 = 0;

/// Tunables. `Config::default()` suits QEMU and real hardware.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// Upper bound on tags. The driver uses `min(this, fw_cmds - 1, ctrl_info.max_cmds - 1)`.
    pub max_tags: u16,
    /// Upper bound on scatter-gather elements per command.
    pub max_sge: u16,
    /// How long the firmware may stay in one state during bring-up.
    pub state_timeout_us: u64,
    /// How long the whole bring-up (or a controller reset) may take, all states together. The MFI
    /// worst case is 180 s; without this, per-state limits add up (32 states x 60 s).
    pub bringup_timeout_us: u64,
    /// Poll interval while waiting for a firmware state change.
    pub state_poll_us: u32,
    /// How long a polled command (INIT, DCMD, READ CAPACITY) may take.
    pub command_timeout_us: u64,
    /// Poll interval of polled commands.
    pub command_poll_us: u32,
    /// How often discovery retries a UNIT ATTENTION (expected once per disk after a VM reset).
    pub unit_attention_retries: u8,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            max_tags: tags::MAX_TAGS,
            max_sge: frame::QEMU_MAX_SGE as u16,
            state_timeout_us: 60_000_000,
            bringup_timeout_us: 180_000_000,
            state_poll_us: 1_000,
            command_timeout_us: 30_000_000,
            command_poll_us: 20,
            unit_attention_retries: 3,
        }
    }
}

pub use crate::host_common::{IoOp, IoRequest};

/// A discovered logical drive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogicalDrive {
    /// Target id used in I/O requests.
    pub target: u8,
    /// Capacity in logical blocks (READ CAPACITY(16)).
    pub blocks: u64,
    /// Logical block size in bytes (512 or 4096 on QEMU).
    pub block_size: u32,
    /// Size the LD list reports, in 512-byte sectors.
    pub list_sectors: u64,
    /// LD state from the list (3 = OPTIMAL); 0 for a system PD.
    pub state: u8,
    /// A system PD (JBOD disk, from PD_LIST_QUERY) rather than a logical drive: `target` is
    /// its SCSI id and I/O goes through PD SCSI pass-through.
    pub system_pd: bool,
}

impl LogicalDrive {
    /// Capacity in bytes.
    pub const fn capacity_bytes(&self) -> u64 {
        self.blocks * self.block_size as u64
    }
}

/// How completions reach the driver; decides what [`Controller::handle_interrupt`] acknowledges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IrqMode {
    /// MSI-X vector 0 (the only one QEMU signals): no register ack.
    Msix,
    /// MSI: no register ack.
    Msi,
    /// Legacy INTx, possibly shared: check OSTS, ack through ODCR0 before draining.
    Intx,
    /// No interrupts: the caller polls [`Controller::reap`].
    Polled,
}

/// One accepted completion, as [`Controller::reap_with`] reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Done {
    /// Controller tag.
    pub tag: u16,
    /// The cookie given to [`Controller::submit_cookie`].
    pub cookie: u64,
    /// What the device reported (a controller reset reports `Failed` with kind `Aborted`).
    pub status: IoStatus,
    /// An ABORT was pending for the command (it completed on its own, was aborted, or was
    /// given up by a controller reset).
    pub aborted: bool,
}

/// Counters of the recovery paths.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecoveryCounters {
    /// ABORT frames sent.
    pub aborts_sent: u64,
    /// Aborts that ended with the command given up by the device (its reply, or the abort's OK).
    pub aborts_confirmed: u64,
    /// Aborts the device refused (any status but OK while the command was still in flight).
    pub aborts_failed: u64,
    /// Controller resets completed.
    pub resets: u64,
    /// Commands failed by controller resets.
    pub reset_failed_commands: u64,
    /// Polled commands that timed out (their tag and buffer were quarantined).
    pub quarantined: u64,
}

/// What one [`Controller::reap`] call did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reaped {
    /// Completions handed to the callback.
    pub completed: u32,
    /// Reply entries of polled commands, skipped.
    pub polled_echoes: u32,
    /// Entries rejected as controller faults.
    pub faults: u32,
    /// The first fault seen, for the log.
    pub first_fault: Option<Fault>,
    /// Another context was reaping; it will pick up everything this call would have.
    pub contended: bool,
    /// Gave up after many rounds with completions still arriving: call `reap` again.
    pub more_pending: bool,
}

/// What a tag is doing, as [`Controller::command_state`] reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommandState {
    /// No command.
    Free,
    /// A frame is being built; not posted yet.
    Prepared,
    /// Posted, owned by the device.
    Posted,
    /// Posted, and an ABORT for it was sent.
    Aborting,
    /// A polled command timed out; reserved until a controller reset.
    Quarantined,
    /// A polled admin command or an ABORT frame.
    Admin,
}

/// Per-target capacity, published by discovery and read lock-free by `submit`.
struct DriveSlot {
    /// 0 = no drive.
    block_size: AtomicU32,
    blocks: AtomicU64,
}

/// Result of a polled command: status bytes and up to [`SENSE_LEN`] bytes of sense.
struct Polled {
    mfi: MfiStatus,
    scsi: u8,
    sense: [u8; SENSE_LEN],
    sense_len: usize,
}

impl Polled {
    fn error(&self) -> Option<IoError> {
        IoError::classify(self.mfi, self.scsi, &self.sense[..self.sense_len])
    }
}

/// An initialised MFI controller.
///
/// Concurrency: `submit` may run on several CPUs at once as long as each tag is used by one
/// submitter at a time (the block layer's tag ownership); distinct tags share no mutable state and
/// the doorbell write is the only shared action (plus a short lock around the IQPH/IQPL pair, taken
/// only when the frame pool lies above 4 GiB). `reap` may be called from any context; concurrent
/// callers are serialised by a flag and never lose a completion. Admin commands (`discover`,
/// `ld_info`, `read_capacity`) take a tag from the caller and poll; they may run while I/O flows.
pub struct Controller<M: Mmio, D: Dma, T: Delay> {
    mmio: M,
    delay: T,
    /// Keeps the DMA memory alive (the `Dma` contract ties it to this value).
    _dma: D,
    model: Model,
    config: Config,
    fw_status: FwStatus,
    info: ControllerInfo,
    /// Usable tags: `0..ntags`.
    ntags: u16,
    max_sge: u16,
    /// Frames, then sense buffers, then a dummy data buffer.
    pool: DmaBuf,
    frame_stride: usize,
    sense_off: usize,
    dummy_off: usize,
    /// Producer word, consumer word, queue-info block, reply entries.
    ring: DmaBuf,
    ring_entries: u32,
    admin: DmaBuf,
    admin_busy: AtomicBool,
    /// Per-tag state, cookie and last I/O frame length (for [`Self::resubmit`]).
    tags: TagTable,
    /// Consumer index, owned by whoever holds `gate`.
    ci: AtomicU32,
    gate: ReapGate,
    post_lock: AtomicBool,
    operational: AtomicBool,
    irq_enabled: AtomicBool,
    drives: [DriveSlot; dcmd::MAX_LD],
    /// System PDs by SCSI id (PD_LIST_QUERY device id >> 8, LUN 0).
    pds: [DriveSlot; MAX_PD_TARGETS],
    faults: AtomicU64,
    /// Submitters inside their critical section (between `begin_submit` and the guard's drop),
    /// a count per lane (the submitting CPU, folded into [`SUBMIT_LANES`]), closed while a
    /// controller reset runs: `begin_submit` refuses then. One count for the controller would be a
    /// line every CPU's every submission writes twice (`drvkit::gate`).
    submit_gate: drvkit::gate::Gate,
    /// The admin buffer is held by a polled command that timed out.
    admin_quarantined: AtomicBool,
    /// Tag and generation (`tag | generation << 16`) of the command the pending ABORT is for.
    abort_victim: AtomicU32,
    /// An abort was refused: the next `reset_if_needed` resets the controller.
    reset_requested: AtomicBool,
    aborts_sent: AtomicU64,
    aborts_confirmed: AtomicU64,
    aborts_failed: AtomicU64,
    resets: AtomicU64,
    reset_failed_commands: AtomicU64,
    quarantined: AtomicU64,
}

impl<M: Mmio, D: Dma, T: Delay> fmt::Debug for Controller<M, D, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Controller")
            .field("model", &self.model)
            .field("fw_status", &self.fw_status)
            .field("tags", &self.ntags)
            .field("max_sge", &self.max_sge)
            .finish_non_exhaustive()
    }
}

impl<M: Mmio, D: Dma, T: Delay> Controller<M, D, T> {
    /// The controller model.
    pub fn model(&self) -> Model {
        self.model
    }

    /// Controller information from CTRL_GET_INFO.
    pub fn info(&self) -> &ControllerInfo {
        &self.info
    }

    /// The firmware status word read at bring-up (READY, with fw_cmds and fw_sge).
    pub fn bringup_status(&self) -> FwStatus {
        self.fw_status
    }

    /// Most commands that may be in flight at once: tags are `0..max_inflight()`. This is the
    /// firmware limit minus one (QEMU answers BUSY past its limit and the BUSY reply itself takes a
    /// reply-queue slot), so the block layer sizes its tag set with it and waits for tags beyond.
    pub fn max_inflight(&self) -> u16 {
        self.ntags
    }

    /// Most scatter-gather segments per request.
    pub fn max_segments(&self) -> u16 {
        self.max_sge
    }

    /// Most bytes one request may transfer (CTRL_GET_INFO max_request_size, in 512-byte sectors).
    pub fn max_transfer_bytes(&self) -> u64 {
        u64::from(self.info.max_request_sectors) * 512
    }

    /// Number of reply-queue entries (the firmware's command limit).
    pub fn reply_ring_entries(&self) -> u32 {
        self.ring_entries
    }

    /// Reads the firmware status word now.
    pub fn firmware_status(&self) -> FwStatus {
        FwStatus(self.mmio.read32(self.model.status_register()))
    }

    /// Checks that the firmware is still OPERATIONAL. On FAULT (or any other state: a reset
    /// happened behind the driver's back) the controller is marked not operational and further
    /// submissions fail; the caller decides whether to re-create it.
    pub fn check_firmware(&self) -> Result<FwStatus, Error> {
        let status = self.firmware_status();
        match status.state() {
            FwState::Operational => Ok(status),
            FwState::Fault => {
                self.operational.store(false, Ordering::Release);
                log::error!("megasas: firmware FAULT: {status}");
                Err(Error::FirmwareFault { status })
            }
            state => {
                self.operational.store(false, Ordering::Release);
                log::error!("megasas: firmware left OPERATIONAL: {status}");
                Err(Error::FirmwareStateChanged { state })
            }
        }
    }

    /// Whether the controller accepts submissions.
    pub fn is_operational(&self) -> bool {
        self.operational.load(Ordering::Acquire)
    }

    /// Total completions rejected as controller faults since bring-up.
    pub fn fault_count(&self) -> u64 {
        self.faults.load(Ordering::Relaxed)
    }

    /// Tags currently not idle (diagnostics; racy by nature).
    pub fn busy_tags(&self) -> usize {
        self.tags.busy()
    }

    fn frame(&self, tag: u16) -> FrameWriter<'_> {
        FrameWriter {
            buf: &self.pool,
            base: usize::from(tag) * self.frame_stride,
        }
    }

    fn sense_phys(&self, tag: u16) -> u64 {
        self.pool.phys_at(self.sense_off + usize::from(tag) * SENSE_LEN)
    }

    /// Zeroes the start of `tag`'s sense buffer (its response code), for a tag whose command the
    /// device is done with: submissions do not clear it, so every path that ends a command that
    /// may have left sense calls this before the tag is free again.
    fn clear_sense(&self, tag: u16) {
        self.pool.write_u64(self.sense_off + usize::from(tag) * SENSE_LEN, 0);
    }

    fn check_tag(&self, tag: u16) -> Result<(), Error> {
        if tag >= self.ntags {
            return Err(Error::TagOutOfRange { tag, tags: self.ntags });
        }
        Ok(())
    }
}
