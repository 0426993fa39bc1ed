//! The controller: firmware bring-up, INIT, discovery, I/O submission and reply-queue reaping.

use alloc::vec;
use alloc::vec::Vec;
use core::fmt;
use core::hint::spin_loop;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering, fence};

use crate::Error;
use crate::dcmd::{self, Capacity, ControllerInfo, LdInfo, LdListEntry};
use crate::error::{BogusReason, Fault};
use crate::frame::{self, FrameWriter, Header, Segment};
use crate::gate::{GateOutcome, ReapGate};
use crate::model::Model;
use crate::regs::{self, FwState, FwStatus};
use crate::status::{IoError, IoErrorKind, IoStatus, MfiStatus, SCSI_CHECK_CONDITION};
use crate::tags::{self, TagTable};
use crate::{Delay, Dma, Mmio};
use devhal::DmaBuf;

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
/// PD_LIST_QUERY buffer: the admin buffer (QEMU fills as many 24-byte entries as fit, ≥ 32 B).
const PD_LIST_LEN: usize = ADMIN_LEN;
/// System PDs are kept by SCSI id below this (Linux puts PDs on channels 0-1, ids < 128 each).
pub const MAX_PD_TARGETS: usize = 128;
/// Give up after this many firmware state changes without reaching READY.
const MAX_TRANSITIONS: u32 = 32;
/// Attempts on FAULT: the IDB reset, then the DIAG adapter reset.
const FAULT_ATTEMPTS: u32 = 2;
/// Rounds of lock-drain-unlock-recheck one `reap` call makes.
const MAX_REAP_ROUNDS: u32 = 64;
/// Reply-queue faults logged one by one; after that they are only counted (the host logs a
/// summary per second), so a hostile device cannot flood the console.
const FAULT_LOG_FIRST: u64 = 16;
/// How many generations a polled command's reply-queue echo may lag behind its tag.
const POLLED_ECHO_WINDOW: u16 = 256;
/// Polls a controller reset waits for submitters to leave their critical section.
const RESET_SUBMITTER_POLLS: u32 = 1000;
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

/// Bring-up helpers that run before the controller struct exists.
struct Bringup<'a, M, T> {
    mmio: &'a M,
    delay: &'a T,
    model: Model,
    config: &'a Config,
    /// Virtual time waited so far, against `config.bringup_timeout_us`.
    waited_total: core::cell::Cell<u64>,
}

impl<M: Mmio, T: Delay> Bringup<'_, M, T> {
    fn status(&self) -> FwStatus {
        FwStatus(self.mmio.read32(self.model.status_register()))
    }

    /// One poll interval, charged to the overall bring-up deadline. `Err` when it is spent.
    fn pause(&self, state: FwState) -> Result<(), Error> {
        let total = self.waited_total.get();
        if total >= self.config.bringup_timeout_us {
            return Err(Error::BringupTimeout {
                state,
                waited_us: total,
                limit_us: self.config.bringup_timeout_us,
            });
        }
        self.delay.delay_us(self.config.state_poll_us);
        self.waited_total
            .set(total.saturating_add(u64::from(self.config.state_poll_us.max(1))));
        Ok(())
    }

    /// Polls until the state differs from `from`, up to the state timeout and the overall
    /// bring-up deadline, whichever comes first.
    fn wait_state_change(&self, from: FwState) -> Result<FwStatus, Error> {
        let mut waited = 0u64;
        loop {
            let s = self.status();
            if s.state() != from {
                return Ok(s);
            }
            if waited >= self.config.state_timeout_us {
                return Err(Error::FirmwareTimeout {
                    state: from,
                    waited_us: waited,
                });
            }
            self.pause(from)?;
            waited += u64::from(self.config.state_poll_us.max(1));
        }
    }

    /// Polls a register until `done(value)`, up to the state timeout. Returns whether it got there.
    fn wait_reg(&self, offset: u32, done: impl Fn(u32) -> bool) -> bool {
        let mut waited = 0u64;
        while !done(self.mmio.read32(offset)) {
            if waited >= self.config.state_timeout_us || self.pause(FwState::Fault).is_err() {
                return false;
            }
            waited += u64::from(self.config.state_poll_us.max(1));
        }
        true
    }

    /// The SEQ/DIAG adapter reset (Linux `megasas_adp_reset_gen2`). Returns false when the
    /// controller does not honour the unlock sequence or the reset bit never clears.
    fn adapter_reset(&self) -> bool {
        for v in regs::SEQ_UNLOCK {
            self.mmio.write32(regs::SEQ, v);
        }
        if !self.wait_reg(regs::DIAG, |d| d & regs::DIAG_WRITE_ENABLE != 0) {
            return false;
        }
        let diag = self.mmio.read32(regs::DIAG);
        self.mmio.write32(regs::DIAG, diag | regs::DIAG_RESET_ADAPTER);
        self.wait_reg(regs::DIAG, |d| d & regs::DIAG_RESET_ADAPTER == 0)
    }

    /// Drives the firmware from any state to READY (as Linux's `megasas_transition_to_ready`).
    fn to_ready(&self) -> Result<FwStatus, Error> {
        let mut transitions = 0u32;
        let mut fault_attempts = 0u32;
        loop {
            let status = self.status();
            let state = status.state();
            match state {
                FwState::Ready => return Ok(status),
                FwState::Fault => {
                    if fault_attempts >= FAULT_ATTEMPTS {
                        return Err(Error::FirmwareFault { status });
                    }
                    log::warn!(
                        "megasas: firmware in FAULT ({status}), attempting reset {}",
                        fault_attempts + 1
                    );
                    if fault_attempts == 0 {
                        // QEMU recovers from FAULT on the doorbell reset; real hardware needs DIAG.
                        self.mmio.write32(regs::IDB, regs::IDB_RESET_FLAGS);
                    } else if !self.adapter_reset() {
                        return Err(Error::FirmwareFault { status });
                    }
                    fault_attempts += 1;
                    match self.wait_state_change(FwState::Fault) {
                        Ok(_) | Err(Error::FirmwareTimeout { .. }) => {}
                        Err(e) => return Err(e),
                    }
                    continue;
                }
                FwState::Operational => self.mmio.write32(regs::IDB, regs::IDB_RESET_FLAGS),
                FwState::WaitHandshake => self
                    .mmio
                    .write32(regs::IDB, regs::IDB_CLEAR_HANDSHAKE | regs::IDB_HOTPLUG),
                FwState::BootMsgPending => self.mmio.write32(regs::IDB, regs::IDB_HOTPLUG),
                // Transitional states move on by themselves.
                _ => {}
            }
            transitions += 1;
            if transitions > MAX_TRANSITIONS {
                return Err(Error::FirmwareNoProgress {
                    transitions,
                    last: state,
                });
            }
            self.wait_state_change(state)?;
        }
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

/// An I/O request [`Controller::check`] validated (drive, range, transfer size, segments),
/// with the drive's block size; only `check` makes one.
#[derive(Debug)]
pub struct CheckedRequest<'r> {
    req: &'r IoRequest<'r>,
    block_size: u32,
}

/// A logical drive's read or write of one data segment: the block binding's common I/O, checked
/// by [`Controller::check_ld_io`] and posted by [`Controller::submit_ld_io`] without an
/// [`IoRequest`] (the same frame as [`Controller::submit`] of the equivalent request).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LdIo {
    /// A write (else a read).
    pub write: bool,
    /// Logical drive target id.
    pub target: u8,
    /// First logical block (in the drive's block size).
    pub lba: u64,
    /// Number of logical blocks.
    pub blocks: u32,
    /// The data buffer: `blocks * block_size` bytes.
    pub segment: Segment,
}

/// An [`LdIo`] that [`Controller::check_ld_io`] validated; only it makes one.
#[derive(Clone, Copy, Debug)]
pub struct CheckedLdIo(LdIo);

/// A submitter's pass through the controller: while one exists, a controller reset waits. Get it
/// with [`Controller::begin_submit`] before handing a request to the block layer's `issue`, so a
/// reset in progress makes the request go back to the queue instead.
pub struct SubmitGuard<'a> {
    // Leaving the gate on drop is a Release decrement: the frame stores and the doorbell happen
    // before the reset sees the count drop.
    _inside: drvkit::gate::Inside<'a>,
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
    /// Brings the controller to OPERATIONAL: firmware to READY (resetting it from whatever state an
    /// earlier boot stage left), frame pool and reply queue allocated, INIT sent, CTRL_GET_INFO read.
    ///
    /// Interrupts stay masked at the controller. The caller then runs [`Self::discover`], programs
    /// MSI-X/MSI/INTx (or disables delivery for polled mode) and calls [`Self::enable_interrupts`]:
    /// QEMU's reply queue advances only while unmasked, polled mode included.
    pub fn new(model: Model, mmio: M, dma: D, delay: T, config: Config) -> Result<Self, Error> {
        let bring = Bringup {
            mmio: &mmio,
            delay: &delay,
            model,
            config: &config,
            waited_total: core::cell::Cell::new(0),
        };
        bring.to_ready()?;
        // Mask while READY: on QEMU this resets once more and clears stale unit attentions.
        mmio.write32(regs::OMSK, 0xFFFF_FFFF);
        let fw_status = bring.to_ready()?;
        let fw_cmds = fw_status.max_cmds();
        if fw_cmds < 2 {
            return Err(Error::FirmwareLimits {
                status: fw_status,
                reason: "max_cmds below 2 leaves no tag",
            });
        }
        if fw_status.max_sge() == 0 {
            return Err(Error::FirmwareLimits {
                status: fw_status,
                reason: "max_sge is 0",
            });
        }
        // In flight plus unconsumed must stay below fw_cmds (QEMU has no ring-full check).
        let ntags = (fw_cmds - 1).min(config.max_tags).clamp(1, tags::MAX_TAGS);
        let window_sge = ((frame::QEMU_SGL_WINDOW - frame::PASS_SGL) / frame::SGE64_LEN) as u16;
        let max_sge = u16::from(fw_status.max_sge())
            .min(config.max_sge)
            .min(frame::QEMU_MAX_SGE as u16)
            .min(window_sge)
            .max(1);
        let frame_stride = (frame::PASS_SGL + usize::from(max_sge) * frame::SGE64_LEN)
            .next_power_of_two()
            .max(256);
        let n = usize::from(ntags);
        let sense_off = n * frame_stride;
        let dummy_off = sense_off + n * SENSE_LEN;
        // QEMU maps 2 KiB from every frame, so the last frame needs that much memory after it.
        let pool_len = (dummy_off + 64).max((n - 1) * frame_stride + frame::QEMU_SGL_WINDOW);
        let pool = DmaBuf::alloc(&dma, pool_len, 4096)?;
        // QEMU wraps its producer at fw_cmds whatever rq_entries says: declare exactly that many.
        let ring_entries = u32::from(fw_cmds);
        let ring = DmaBuf::alloc(&dma, RING_ENTRIES + 4 * ring_entries as usize, 4096)?;
        let admin = DmaBuf::alloc(&dma, ADMIN_LEN, 4096)?;
        for i in 0..ring_entries as usize {
            ring.atomic_u32(RING_ENTRIES + 4 * i)
                .store(RING_SENTINEL, Ordering::Relaxed);
        }
        let mut ctrl = Self {
            mmio,
            delay,
            _dma: dma,
            model,
            config,
            fw_status,
            info: ControllerInfo {
                vendor_id: 0,
                device_id: 0,
                subvendor_id: 0,
                subdevice_id: 0,
                product: alloc::string::String::new(),
                serial: alloc::string::String::new(),
                firmware: alloc::string::String::new(),
                package: alloc::string::String::new(),
                max_cmds: fw_cmds,
                max_sge,
                max_request_sectors: 0,
                lds_present: 0,
                pds_present: 0,
            },
            ntags,
            max_sge,
            pool,
            frame_stride,
            sense_off,
            dummy_off,
            ring,
            ring_entries,
            admin,
            admin_busy: AtomicBool::new(false),
            tags: TagTable::new(ntags),
            ci: AtomicU32::new(0),
            gate: ReapGate::new(),
            post_lock: AtomicBool::new(false),
            operational: AtomicBool::new(false),
            irq_enabled: AtomicBool::new(false),
            drives: core::array::from_fn(|_| DriveSlot {
                block_size: AtomicU32::new(0),
                blocks: AtomicU64::new(0),
            }),
            pds: core::array::from_fn(|_| DriveSlot {
                block_size: AtomicU32::new(0),
                blocks: AtomicU64::new(0),
            }),
            faults: AtomicU64::new(0),
            submit_gate: drvkit::gate::Gate::new(SUBMIT_LANES),
            admin_quarantined: AtomicBool::new(false),
            abort_victim: AtomicU32::new(0),
            reset_requested: AtomicBool::new(false),
            aborts_sent: AtomicU64::new(0),
            aborts_confirmed: AtomicU64::new(0),
            aborts_failed: AtomicU64::new(0),
            resets: AtomicU64::new(0),
            reset_failed_commands: AtomicU64::new(0),
            quarantined: AtomicU64::new(0),
        };
        ctrl.init_queue()?;
        let info = ctrl.ctrl_get_info(ADMIN_TAG)?;
        ctrl.ntags = ctrl.ntags.min(info.max_cmds - 1);
        ctrl.max_sge = ctrl.max_sge.min(info.max_sge);
        log::info!(
            "megasas: {} operational: {}; {} tags, {} SGEs, reply ring {} entries",
            ctrl.model,
            info,
            ctrl.ntags,
            ctrl.max_sge,
            ctrl.ring_entries
        );
        ctrl.info = info;
        ctrl.operational.store(true, Ordering::Release);
        Ok(ctrl)
    }

    fn bringup(&self) -> Bringup<'_, M, T> {
        Bringup {
            mmio: &self.mmio,
            delay: &self.delay,
            model: self.model,
            config: &self.config,
            waited_total: core::cell::Cell::new(0),
        }
    }

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

    /// Posts the frame of `tag`. Never one 64-bit store: QEMU splits it low half first and posts
    /// with the wrong high word; IQPH is written before IQPL. Inlined
    /// (a frame below 4 GiB is one store); a frame above goes through [`Self::post_high`].
    #[inline(always)]
    fn post(&self, tag: u16, frame_bytes: usize) {
        let phys = self.pool.phys_at(usize::from(tag) * self.frame_stride);
        let extra = (frame_bytes.saturating_sub(1) / 64).min(15) as u32;
        let low = (phys as u32) | (extra << 1) | 1;
        let high = (phys >> 32) as u32;
        // The frame stores must be visible before the doorbell. On x86 stores are not reordered
        // with the later uncached MMIO store; the fence stops the compiler from doing so.
        fence(Ordering::Release);
        if high == 0 {
            // IQP implies high word 0 and is a single store: no lock.
            self.mmio.write32(regs::IQP, low);
        } else {
            self.post_high(high, low);
        }
    }

    /// Posts a frame above 4 GiB: IQPH, then IQPL, under `post_lock`.
    #[inline(never)]
    fn post_high(&self, high: u32, low: u32) {
        // IQPH latches a high word that the next IQPL consumes: two CPUs interleaving
        // IQPH/IQPH/IQPL/IQPL would post one frame with the other's high word.
        while self
            .post_lock
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            spin_loop();
        }
        self.mmio.write32(regs::IQPH, high);
        self.mmio.write32(regs::IQPL, low);
        self.post_lock.store(false, Ordering::Release);
    }

    fn check_tag(&self, tag: u16) -> Result<(), Error> {
        if tag >= self.ntags {
            return Err(Error::TagOutOfRange { tag, tags: self.ntags });
        }
        Ok(())
    }

    /// Builds, posts and polls one command on `tag`.
    fn run_polled(
        &self,
        tag: u16,
        what: &'static str,
        frame_bytes: usize,
        build: impl FnOnce(&FrameWriter<'_>, u32),
    ) -> Result<Polled, Error> {
        self.check_tag(tag)?;
        if self.tags.load(tag).0 == tags::QUARANTINED {
            return Err(Error::AdminQuarantined);
        }
        let generation = self.tags.claim(tag)?;
        let ctx = tags::encode_context(tag, generation, true);
        let w = self.frame(tag);
        build(&w, ctx);
        self.tags.publish(tag, tags::POLLED, generation);
        self.post(tag, frame_bytes);
        let status = self.pool.atomic_u8(w.base + frame::OFF_CMD_STATUS);
        let mut waited = 0u64;
        // Acquire pairs with the device's store of the status byte, written after sense and data.
        let mfi = loop {
            let s = status.load(Ordering::Acquire);
            if s != MfiStatus::PENDING.0 {
                break MfiStatus(s);
            }
            if waited >= self.config.command_timeout_us {
                // The device still owns the frame (and whatever buffer it points at): the tag is
                // quarantined until a controller reset makes the device give everything up.
                self.tags.quarantine(tag, generation);
                self.quarantined.fetch_add(1, Ordering::Relaxed);
                log::error!(
                    "megasas: {what} on tag {tag} timed out after {waited} us; tag quarantined until a controller reset"
                );
                return Err(Error::CommandTimeout {
                    what,
                    tag,
                    waited_us: waited,
                });
            }
            self.delay.delay_us(self.config.command_poll_us);
            waited += u64::from(self.config.command_poll_us.max(1));
        };
        let polled = self.read_completion(tag, mfi);
        self.tags.finish(tag, generation);
        Ok(polled)
    }

    fn take_admin(&self) -> Result<AdminGuard<'_>, Error> {
        // Acquire pairs with the Release in `reset`, which lifts the quarantine.
        if self.admin_quarantined.load(Ordering::Acquire) {
            return Err(Error::AdminQuarantined);
        }
        AdminGuard::take(&self.admin_busy)
    }

    /// A polled command that timed out leaves the admin buffer to the device: the guard is not
    /// released (the buffer stays taken) until a controller reset.
    fn keep_admin_on_timeout(&self, guard: AdminGuard<'_>, r: Result<Polled, Error>) -> Result<Polled, Error> {
        if let Err(Error::CommandTimeout { .. }) = r {
            self.admin_quarantined.store(true, Ordering::Release);
            core::mem::forget(guard);
        }
        r
    }

    /// Sends an MFI ABORT for the command on `victim` (which must be POSTED), using the admin
    /// tag's frame. The command goes POSTED -> ABORTING; its completion (normal, or 0x2E when
    /// aborted) is reported by the reaper with [`Done::aborted`] set. If the ABORT is refused
    /// while the command is still in flight, [`Self::reset_requested`] becomes true.
    /// Only one abort is in flight at a time ([`Error::AbortUnavailable`] otherwise).
    pub fn abort(&self, victim: u16) -> Result<(), Error> {
        self.check_tag(victim)?;
        if victim == ADMIN_TAG {
            return Err(Error::NotAbortable { tag: victim });
        }
        let _guard = self.begin_submit()?;
        let (state, vgen) = self.tags.load(victim);
        if state != tags::POSTED {
            return Err(Error::NotAbortable { tag: victim });
        }
        let generation = match self.tags.claim(ADMIN_TAG) {
            Ok(g) => g,
            Err(_) if self.tags.load(ADMIN_TAG).0 == tags::QUARANTINED => return Err(Error::AdminQuarantined),
            Err(_) => return Err(Error::AbortUnavailable),
        };
        if !self.tags.start_abort(victim, vgen) {
            // It completed between the load and here.
            self.tags.finish(ADMIN_TAG, generation);
            return Err(Error::NotAbortable { tag: victim });
        }
        // Published to the reaper by the Release in `publish` below.
        self.abort_victim
            .store(u32::from(victim) | (u32::from(vgen) << 16), Ordering::Relaxed);
        let w = self.frame(ADMIN_TAG);
        w.header(&Header {
            cmd: frame::CMD_ABORT,
            sense_len: 0,
            target: 0,
            cdb_len: 0,
            sge_count: 0,
            context: tags::encode_context(ADMIN_TAG, generation, false),
            flags: 0,
            data_len: 0,
        });
        w.u64_at(0x18, u64::from(tags::encode_context(victim, vgen, false)));
        w.u64_at(0x20, self.pool.phys_at(usize::from(victim) * self.frame_stride));
        self.tags.publish(ADMIN_TAG, tags::ABORT_FRAME, generation);
        self.post(ADMIN_TAG, 64);
        self.aborts_sent.fetch_add(1, Ordering::Relaxed);
        log::warn!("megasas: tag {victim} timed out; ABORT sent");
        Ok(())
    }

    /// What a tag is doing now (for the timeout handler; racy by nature).
    pub fn command_state(&self, tag: u16) -> CommandState {
        if tag >= self.ntags {
            return CommandState::Free;
        }
        match self.tags.load(tag).0 {
            tags::FREE => CommandState::Free,
            tags::PREPARED => CommandState::Prepared,
            tags::POSTED => CommandState::Posted,
            tags::ABORTING => CommandState::Aborting,
            tags::QUARANTINED => CommandState::Quarantined,
            _ => CommandState::Admin,
        }
    }

    /// Whether an abort was refused (or the caller asked) and the controller should be reset.
    pub fn reset_requested(&self) -> bool {
        self.reset_requested.load(Ordering::Acquire)
    }

    /// Asks for a controller reset at the next [`Self::reset`] opportunity.
    pub fn request_reset(&self) {
        self.reset_requested.store(true, Ordering::Release);
    }

    /// Counters of the abort/reset paths.
    pub fn recovery_counters(&self) -> RecoveryCounters {
        RecoveryCounters {
            aborts_sent: self.aborts_sent.load(Ordering::Relaxed),
            aborts_confirmed: self.aborts_confirmed.load(Ordering::Relaxed),
            aborts_failed: self.aborts_failed.load(Ordering::Relaxed),
            resets: self.resets.load(Ordering::Relaxed),
            reset_failed_commands: self.reset_failed_commands.load(Ordering::Relaxed),
            quarantined: self.quarantined.load(Ordering::Relaxed),
        }
    }

    /// Controller reset (online recovery): stops submissions (they get [`Error::Resetting`]),
    /// takes the reply queue, reports completions already in the ring, then resets the firmware
    /// (IDB ABORT|READY, which makes the device give up every frame), re-sends INIT with a fresh
    /// reply queue and re-enables interrupts. Every command that was in flight is then reported
    /// through `complete` as failed (kind `Aborted`): **failed, never re-issued** (the block layer's
    /// owner decides about retries). Quarantined admin tags and buffers are freed.
    ///
    /// Must not run concurrently with itself or with admin commands. If the firmware does not come
    /// back, the error is returned, the controller is marked not operational and the commands in
    /// flight stay owned by the device (the caller must stop bus mastering before giving their
    /// buffers back).
    pub fn reset(&self, mut complete: impl FnMut(Done)) -> Result<u32, Error> {
        // Closing the gate pairs with `begin_submit` (Dekker's pattern, `drvkit::gate`): either the
        // reset sees a submitter's count or the submitter sees the gate closed. Given up (and the
        // gate opened again) after `RESET_SUBMITTER_POLLS` waits.
        let mut polls = 0;
        let Some(closed) = self.submit_gate.close_within(|| self.reset_wait(&mut polls)) else {
            return Err(Error::ResetDeferred);
        };
        let mut polls = 0;
        while !self.gate.try_lock() {
            if !self.reset_wait(&mut polls) {
                // Dropping `closed` opens the submission gate again.
                return Err(Error::ResetDeferred);
            }
        }
        let result = self.reset_locked(&mut complete);
        self.gate.unlock();
        drop(closed);
        if let Err(e) = &result {
            log::error!("megasas: controller reset failed: {e}; controller is out of service");
        }
        result
    }

    /// One wait of a reset for submitters or the reaper to leave: 1 µs, or `false` once
    /// `RESET_SUBMITTER_POLLS` of them were spent (`polls` counts them).
    fn reset_wait(&self, polls: &mut u32) -> bool {
        if *polls >= RESET_SUBMITTER_POLLS {
            return false;
        }
        self.delay.delay_us(1);
        *polls += 1;
        true
    }

    /// Fails every command in flight without touching the device: only for a controller that
    /// could not be reset, **after the caller stopped the device's bus mastering**, so the
    /// buffers really are no longer the device's. Returns how many commands were failed.
    pub fn abandon_in_flight(&self, mut complete: impl FnMut(Done)) -> u32 {
        self.operational.store(false, Ordering::Release);
        self.sweep(&mut complete)
    }

    /// Frees every tag; reports the commands that were in flight as failed (kind `Aborted`).
    fn sweep(&self, complete: &mut impl FnMut(Done)) -> u32 {
        let mut failed = 0u32;
        for tag in 0..self.tags.len() {
            let (state, generation) = self.tags.load(tag);
            match state {
                tags::FREE => {}
                tags::POSTED | tags::ABORTING => {
                    let cookie = self.tags.cookie(tag);
                    self.tags.finish(tag, generation);
                    failed += 1;
                    complete(Done {
                        tag,
                        cookie,
                        status: IoStatus::Failed(IoError {
                            kind: IoErrorKind::Aborted,
                            mfi_status: MfiStatus::SCSI_IO_FAILED,
                            scsi_status: 0,
                            sense: None,
                        }),
                        aborted: state == tags::ABORTING,
                    });
                }
                _ => self.tags.finish(tag, generation),
            }
        }
        failed
    }

    fn reset_locked(&self, complete: &mut impl FnMut(Done)) -> Result<u32, Error> {
        let irq_was_enabled = self.irq_enabled.load(Ordering::Acquire);
        // Completions that already arrived keep their real status.
        let mut out = Reaped::default();
        self.drain(&mut out, complete, &core::cell::Cell::new(u32::MAX));
        self.operational.store(false, Ordering::Release);
        self.irq_enabled.store(false, Ordering::Release);
        log::warn!("megasas: resetting the controller");
        let bring = self.bringup();
        // From OPERATIONAL this writes IDB ABORT|READY: QEMU cancels every frame (0x2E into the
        // old ring) and drops the reply queue.
        bring.to_ready()?;
        self.mmio.write32(regs::OMSK, 0xFFFF_FFFF);
        bring.to_ready()?;
        // The device has given up every frame: fail what was in flight, free the rest.
        let failed = self.sweep(complete);
        // Release pairs with the Acquire in `take_admin`.
        self.admin_busy.store(false, Ordering::Release);
        self.admin_quarantined.store(false, Ordering::Release);
        self.reset_requested.store(false, Ordering::Release);
        for i in 0..self.ring_entries as usize {
            self.ring
                .atomic_u32(RING_ENTRIES + 4 * i)
                .store(RING_SENTINEL, Ordering::Relaxed);
        }
        self.init_queue()?;
        self.operational.store(true, Ordering::Release);
        if irq_was_enabled {
            self.enable_interrupts()?;
        }
        self.resets.fetch_add(1, Ordering::Relaxed);
        self.reset_failed_commands
            .fetch_add(u64::from(failed), Ordering::Relaxed);
        log::warn!("megasas: controller reset done; {failed} commands in flight failed");
        Ok(failed)
    }

    /// Reads status and sense of a completed frame.
    fn read_completion(&self, tag: u16, mfi: MfiStatus) -> Polled {
        let base = usize::from(tag) * self.frame_stride;
        let scsi = self.pool.read_u8(base + frame::OFF_SCSI_STATUS);
        let mut sense = [0u8; SENSE_LEN];
        let mut sense_len = 0;
        if mfi != MfiStatus::OK && scsi == SCSI_CHECK_CONDITION {
            // The device wrote how many sense bytes it stored; never read past our buffer.
            sense_len = usize::from(self.pool.read_u8(base + frame::OFF_SENSE_LEN)).min(SENSE_LEN);
            self.pool
                .read_bytes(self.sense_off + usize::from(tag) * SENSE_LEN, &mut sense[..sense_len]);
        }
        Polled {
            mfi,
            scsi,
            sense,
            sense_len,
        }
    }

    /// Sends INIT with the reply queue. The firmware must be READY: QEMU answers INIT while
    /// OPERATIONAL with OK and changes nothing.
    fn init_queue(&self) -> Result<(), Error> {
        // QEMU seeds its head and tail from these words: zero them first.
        self.ring.atomic_u32(RING_PI).store(0, Ordering::Relaxed);
        self.ring.atomic_u32(RING_CI).store(0, Ordering::Relaxed);
        self.ci.store(0, Ordering::Relaxed);
        let q = RING_QINFO;
        self.ring.write_u32(q, 0); // flags: 32-bit contexts
        self.ring.write_u32(q + 4, self.ring_entries);
        self.ring.write_u64(q + 8, self.ring.phys_at(RING_ENTRIES));
        self.ring.write_u64(q + 16, self.ring.phys_at(RING_PI));
        self.ring.write_u64(q + 24, self.ring.phys_at(RING_CI));
        let qinfo = self.ring.phys_at(q);
        let done = self.run_polled(0, "INIT", 64, |w, ctx| {
            w.header(&Header {
                cmd: frame::CMD_INIT,
                sense_len: 0,
                target: 0,
                cdb_len: 0,
                sge_count: 0,
                context: ctx,
                flags: frame::FLAG_DONT_POST,
                data_len: frame::QINFO_LEN as u32,
            });
            w.u64_at(0x18, qinfo);
            w.u64_at(0x20, 0);
        })?;
        if done.mfi != MfiStatus::OK {
            return Err(Error::InitFailed { status: done.mfi });
        }
        let state = self.firmware_status().state();
        if state != FwState::Operational {
            return Err(Error::NotOperationalAfterInit { state });
        }
        Ok(())
    }

    /// Runs a DCMD into the admin buffer and returns the first `len` bytes of its reply.
    fn dcmd(&self, tag: u16, what: &'static str, opcode: u32, mbox0: u8, len: usize) -> Result<Vec<u8>, Error> {
        let guard = self.take_admin()?;
        // QEMU answers some queries OK without writing anything: start from zeroes.
        self.admin.fill(0, len, 0);
        let sge = Segment {
            phys: self.admin.phys_at(0),
            len: len as u32,
        };
        self.run_dcmd(guard, tag, what, opcode, mbox0, Some(sge))?;
        let mut out = vec![0u8; len];
        self.admin.read_bytes(0, &mut out);
        Ok(out)
    }

    /// Runs a DCMD that moves no data (no SGL, direction none).
    fn dcmd_no_data(&self, tag: u16, what: &'static str, opcode: u32, mbox0: u8) -> Result<(), Error> {
        let guard = self.take_admin()?;
        self.run_dcmd(guard, tag, what, opcode, mbox0, None)
    }

    /// Builds and runs one polled DCMD frame, reading into `data` when given.
    fn run_dcmd(
        &self,
        guard: AdminGuard<'_>,
        tag: u16,
        what: &'static str,
        opcode: u32,
        mbox0: u8,
        data: Option<Segment>,
    ) -> Result<(), Error> {
        let frame_bytes = if data.is_some() {
            frame::IO_SGL + frame::SGE64_LEN
        } else {
            frame::IO_SGL
        };
        let done = self.run_polled(tag, what, frame_bytes, |w, ctx| {
            w.header(&Header {
                cmd: frame::CMD_DCMD,
                sense_len: 0,
                target: 0,
                cdb_len: 0,
                sge_count: u8::from(data.is_some()),
                context: ctx,
                flags: if data.is_some() {
                    frame::FLAG_SGL64 | frame::FLAG_DIR_READ | frame::FLAG_DONT_POST
                } else {
                    frame::FLAG_DONT_POST
                },
                data_len: data.map_or(0, |d| d.len),
            });
            w.u32_at(0x18, opcode);
            let mut mbox = [0u8; 12];
            mbox[0] = mbox0;
            w.bytes_at(0x1C, &mbox);
            if let Some(sge) = data {
                w.sgl64(frame::IO_SGL, &[sge]);
            }
        });
        let done = self.keep_admin_on_timeout(guard, done)?;
        match done.error() {
            Some(error) => Err(Error::CommandFailed { what, error }),
            None => Ok(()),
        }
    }

    /// Before power-off: flushes the controller's and the disks' write caches
    /// (CTRL_CACHE_FLUSH) and shuts the firmware down (CTRL_SHUTDOWN), both polled on the admin
    /// tag `tag`. Quiesce the block layer first: the controller takes no I/O afterwards (it is
    /// no longer operational). Unlike [`Controller::shutdown`] nothing is aborted or reset.
    pub fn flush_and_shut_down(&self, tag: u16) -> Result<(), Error> {
        self.dcmd_no_data(
            tag,
            "CTRL_CACHE_FLUSH",
            frame::DCMD_CTRL_CACHE_FLUSH,
            frame::FLUSH_CTRL_AND_DISK_CACHES,
        )?;
        self.dcmd_no_data(tag, "CTRL_SHUTDOWN", frame::DCMD_CTRL_SHUTDOWN, 0)?;
        // Release pairs with the Acquire loads that gate submission.
        self.operational.store(false, Ordering::Release);
        Ok(())
    }

    fn ctrl_get_info(&self, tag: u16) -> Result<ControllerInfo, Error> {
        let b = self.dcmd(tag, "CTRL_GET_INFO", frame::DCMD_CTRL_GET_INFO, 0, dcmd::CTRL_INFO_LEN)?;
        ControllerInfo::parse(&b)
    }

    /// LD_GET_LIST, sorted by target id. (LD_LIST_QUERY is not used: QEMU fills it with LUNs
    /// instead of target ids.)
    pub fn ld_list(&self, tag: u16) -> Result<Vec<LdListEntry>, Error> {
        let b = self.dcmd(tag, "LD_GET_LIST", frame::DCMD_LD_GET_LIST, 0, dcmd::LD_LIST_LEN)?;
        dcmd::parse_ld_list(&b)
    }

    /// The system PDs (JBOD disks) the firmware exposes to the host: PD_LIST_QUERY with mbox
    /// b[0] = 5 (EXPOSED_TO_HOST), as Linux sends it. Disks (SCSI type 0) at LUN 0 only, by SCSI
    /// id (QEMU's device id is `scsi_id << 8 | lun`). Firmware in RAID mode answers OK with an
    /// empty list (QEMU writes nothing: the buffer is zeroed first), so no LD is listed twice.
    pub fn system_pd_disks(&self, tag: u16) -> Result<Vec<u8>, Error> {
        let b = self.dcmd(
            tag,
            "PD_LIST_QUERY",
            frame::DCMD_PD_LIST_QUERY,
            frame::PD_QUERY_EXPOSED_TO_HOST,
            PD_LIST_LEN,
        )?;
        let mut out = Vec::new();
        for pd in dcmd::parse_pd_list(&b)? {
            let (target, lun) = ((pd.device_id >> 8) as u8, pd.device_id & 0xFF);
            if pd.scsi_type != 0 || lun != 0 || usize::from(target) >= MAX_PD_TARGETS {
                log::info!(
                    "megasas: PD device id {:#06x} (type {}) not used: only disks at LUN 0",
                    pd.device_id,
                    pd.scsi_type
                );
                continue;
            }
            out.push(target);
        }
        Ok(out)
    }

    /// LD_GET_INFO for one target.
    pub fn ld_info(&self, tag: u16, target: u8) -> Result<LdInfo, Error> {
        if usize::from(target) >= dcmd::MAX_LD {
            return Err(Error::NoSuchDrive { target });
        }
        let b = self.dcmd(tag, "LD_GET_INFO", frame::DCMD_LD_GET_INFO, target, dcmd::LD_INFO_LEN)?;
        LdInfo::parse(&b)
    }

    /// READ CAPACITY(16) through LD SCSI pass-through (works for 512- and 4096-byte blocks on
    /// QEMU), retrying UNIT ATTENTION.
    pub fn read_capacity(&self, tag: u16, target: u8) -> Result<Capacity, Error> {
        if usize::from(target) >= dcmd::MAX_LD {
            return Err(Error::NoSuchDrive { target });
        }
        self.read_capacity_via(tag, target, frame::CMD_LD_SCSI_IO)
    }

    /// READ CAPACITY(16) of a system PD (SCSI id `target`, LUN 0) through PD SCSI pass-through.
    pub fn pd_read_capacity(&self, tag: u16, target: u8) -> Result<Capacity, Error> {
        self.read_capacity_via(tag, target, frame::CMD_PD_SCSI_IO)
    }

    fn read_capacity_via(&self, tag: u16, target: u8, cmd: u8) -> Result<Capacity, Error> {
        let mut attempt = 0u8;
        loop {
            let guard = self.take_admin()?;
            self.admin.fill(0, dcmd::READ_CAPACITY16_LEN, 0);
            let sge = Segment {
                phys: self.admin.phys_at(0),
                len: dcmd::READ_CAPACITY16_LEN as u32,
            };
            let sense = self.sense_phys(tag);
            let done = self.run_polled(
                tag,
                "READ CAPACITY(16)",
                frame::PASS_SGL + frame::SGE64_LEN,
                |w, ctx| {
                    w.header(&Header {
                        cmd,
                        sense_len: SENSE_LEN as u8,
                        target,
                        cdb_len: 16,
                        sge_count: 1,
                        context: ctx,
                        flags: frame::FLAG_SGL64 | frame::FLAG_SENSE64 | frame::FLAG_DIR_READ | frame::FLAG_DONT_POST,
                        data_len: dcmd::READ_CAPACITY16_LEN as u32,
                    });
                    w.u64_at(0x18, sense);
                    w.bytes_at(0x20, &frame::cdb_read_capacity16());
                    w.sgl64(frame::PASS_SGL, &[sge]);
                },
            );
            let done = self.keep_admin_on_timeout(guard, done)?;
            match done.error() {
                None => {
                    let mut b = [0u8; dcmd::READ_CAPACITY16_LEN];
                    self.admin.read_bytes(0, &mut b);
                    return Capacity::parse(&b);
                }
                Some(e) if e.kind == IoErrorKind::UnitAttention && attempt < self.config.unit_attention_retries => {
                    log::info!("megasas: target {target}: {e}; retrying");
                    attempt += 1;
                }
                Some(error) => {
                    return Err(Error::CommandFailed {
                        what: "READ CAPACITY(16)",
                        error,
                    });
                }
            }
        }
    }

    /// Discovers the logical drives (LD_GET_LIST, then READ CAPACITY(16) per drive), publishes
    /// their capacities for the I/O path's range checks, and logs the device table. Uses `tag` for
    /// its polled commands. Run it while no I/O is in flight to the drives whose size may change.
    pub fn discover(&self, tag: u16) -> Result<Vec<LogicalDrive>, Error> {
        let list = self.ld_list(tag)?;
        let mut present = [false; dcmd::MAX_LD];
        let mut out = Vec::with_capacity(list.len());
        for e in list {
            let cap = self.read_capacity(tag, e.target)?;
            let drive = LogicalDrive {
                target: e.target,
                blocks: cap.blocks,
                block_size: cap.block_size,
                list_sectors: e.size_sectors,
                state: e.state,
                system_pd: false,
            };
            if u128::from(drive.capacity_bytes()) != u128::from(e.size_sectors) * 512 {
                log::warn!(
                    "megasas: target {}: READ CAPACITY says {} bytes, LD list says {} sectors",
                    e.target,
                    drive.capacity_bytes(),
                    e.size_sectors
                );
            }
            let slot = &self.drives[usize::from(e.target)];
            slot.blocks.store(cap.blocks, Ordering::Relaxed);
            // Release publishes `blocks` to the Acquire load of `block_size` in `submit`.
            slot.block_size.store(cap.block_size, Ordering::Release);
            present[usize::from(e.target)] = true;
            out.push(drive);
        }
        for (slot, _) in self.drives.iter().zip(present).filter(|(_, p)| !p) {
            slot.block_size.store(0, Ordering::Release);
        }
        let mut pd_present = [false; MAX_PD_TARGETS];
        // A firmware that refuses the PD query still serves its LDs (Linux goes on too).
        let pds = self.system_pd_disks(tag).unwrap_or_else(|e| {
            log::warn!("megasas: PD_LIST_QUERY failed: {e}; no JBOD disks");
            Vec::new()
        });
        for pd in pds {
            let cap = match self.pd_read_capacity(tag, pd) {
                Ok(c) => c,
                Err(e) => {
                    log::warn!("megasas: JBOD disk target {pd}: {e}; left out");
                    continue;
                }
            };
            let slot = &self.pds[usize::from(pd)];
            slot.blocks.store(cap.blocks, Ordering::Relaxed);
            slot.block_size.store(cap.block_size, Ordering::Release);
            pd_present[usize::from(pd)] = true;
            out.push(LogicalDrive {
                target: pd,
                blocks: cap.blocks,
                block_size: cap.block_size,
                list_sectors: 0,
                state: 0,
                system_pd: true,
            });
        }
        for (slot, _) in self.pds.iter().zip(pd_present).filter(|(_, p)| !p) {
            slot.block_size.store(0, Ordering::Release);
        }
        log::info!(
            "{}",
            DriveTable {
                info: &self.info,
                drives: &out
            }
        );
        Ok(out)
    }

    /// Masks nothing and unmasks the reply interrupt: clears the doorbell, then writes OMSK.
    /// Program MSI-X/MSI first, or the first completions assert INTx. For polled mode, unmask too
    /// (QEMU's ring only advances unmasked) and keep delivery off at the PCI level instead.
    pub fn enable_interrupts(&self) -> Result<(), Error> {
        // Unmasking before INIT makes QEMU write the producer index to address 0.
        if !self.is_operational() {
            return Err(Error::NotOperational);
        }
        self.mmio.write32(regs::ODCR0, 0xFFFF_FFFF);
        self.mmio.write32(regs::OMSK, self.model.unmask_value());
        self.irq_enabled.store(true, Ordering::Release);
        Ok(())
    }

    /// Stops the controller: aborts whatever is outstanding and returns the firmware to READY.
    /// This is the only way to mask at the controller, because on QEMU an all-ones OMSK *is* a soft
    /// reset; while running, mask at the MSI-X vector, IOAPIC or PCI command register.
    /// Quiesce the block layer first: in-flight commands complete with MFI status 0x2E or vanish.
    pub fn shutdown(&self) -> Result<FwStatus, Error> {
        self.operational.store(false, Ordering::Release);
        self.irq_enabled.store(false, Ordering::Release);
        self.mmio.write32(regs::IDB, regs::IDB_RESET_FLAGS);
        let status = self.bringup().to_ready()?;
        self.mmio.write32(regs::OMSK, 0xFFFF_FFFF);
        Ok(status)
    }

    /// The drive slot `target` names in the LD or the system PD table, with its block size (0:
    /// no such drive).
    #[inline(always)]
    fn drive_slot(&self, system_pd: bool, target: u8) -> Result<(&DriveSlot, u32), Error> {
        let table: &[DriveSlot] = if system_pd { &self.pds } else { &self.drives };
        let slot = table.get(usize::from(target)).ok_or(Error::NoSuchDrive { target })?;
        // Acquire pairs with the Release store in `discover`.
        let block_size = slot.block_size.load(Ordering::Acquire);
        if block_size == 0 {
            return Err(Error::NoSuchDrive { target });
        }
        Ok((slot, block_size))
    }

    /// Checks a read or write of `blocks` at `lba` against the drive's capacity and the
    /// controller's transfer limit; returns the bytes it moves.
    #[inline(always)]
    fn check_extent(&self, slot: &DriveSlot, target: u8, lba: u64, blocks: u32, block_size: u32) -> Result<u64, Error> {
        if blocks == 0 {
            return Err(Error::InvalidRequest {
                reason: "read or write of zero blocks",
            });
        }
        let capacity = slot.blocks.load(Ordering::Relaxed);
        if lba.checked_add(u64::from(blocks)).is_none_or(|end| end > capacity) {
            return Err(Error::BeyondEnd {
                target,
                lba,
                blocks,
                capacity,
            });
        }
        let bytes = u64::from(blocks) * u64::from(block_size);
        if bytes > self.max_transfer_bytes() {
            return Err(Error::TransferTooLarge {
                bytes,
                max: self.max_transfer_bytes(),
            });
        }
        Ok(bytes)
    }

    /// Checks a read or write request against the drive table and the controller limits.
    fn validate(&self, req: &IoRequest<'_>) -> Result<u32, Error> {
        let (slot, block_size) = self.drive_slot(req.system_pd, req.target)?;
        if req.op == IoOp::Flush {
            if req.blocks != 0 || req.lba != 0 || !req.sgl.is_empty() {
                return Err(Error::InvalidRequest {
                    reason: "a flush carries no LBA, blocks or data segments",
                });
            }
            return Ok(block_size);
        }
        let bytes = self.check_extent(slot, req.target, req.lba, req.blocks, block_size)?;
        if req.sgl.is_empty() || req.sgl.len() > usize::from(self.max_sge) {
            return Err(Error::TooManySegments {
                count: req.sgl.len(),
                max: self.max_sge,
            });
        }
        let total = if let [s] = req.sgl {
            // The common single-segment I/O without the loop.
            check_segment(0, s)?;
            u64::from(s.len)
        } else {
            let mut total = 0u64;
            for (index, s) in req.sgl.iter().enumerate() {
                check_segment(index, s)?;
                total += u64::from(s.len);
            }
            total
        };
        if total != bytes {
            return Err(Error::SglLengthMismatch {
                sgl_bytes: total,
                expected: bytes,
            });
        }
        Ok(block_size)
    }

    /// Validates a logical drive's read or write of one segment for [`Self::submit_ld_io`]: the
    /// checks [`Self::check`] makes of the same request as an [`IoRequest`], with the same
    /// errors (one segment is within every controller's limit: `max_sge` is at least 1), in
    /// registers rather than through a request on the stack.
    #[inline(always)]
    pub fn check_ld_io(&self, _guard: &SubmitGuard<'_>, io: LdIo) -> Result<CheckedLdIo, Error> {
        let (slot, block_size) = self.drive_slot(false, io.target)?;
        let bytes = self.check_extent(slot, io.target, io.lba, io.blocks, block_size)?;
        check_segment(0, &io.segment)?;
        if u64::from(io.segment.len) != bytes {
            return Err(Error::SglLengthMismatch {
                sgl_bytes: u64::from(io.segment.len),
                expected: bytes,
            });
        }
        Ok(CheckedLdIo(io))
    }

    /// Checks a request against the drive table and the controller limits without submitting it.
    pub fn check_request(&self, req: &IoRequest<'_>) -> Result<(), Error> {
        self.validate(req).map(|_| ())
    }

    /// Validates `req` once, for [`Self::submit_checked`]: the block layer's `queue_rq` checks
    /// inside the submission critical section and then submits without checking again (one
    /// check per I/O, not two). A [`CheckedRequest`] can only be made here.
    #[inline]
    pub fn check<'r>(&self, _guard: &SubmitGuard<'_>, req: &'r IoRequest<'r>) -> Result<CheckedRequest<'r>, Error> {
        Ok(CheckedRequest {
            req,
            block_size: self.validate(req)?,
        })
    }

    /// Enters the submission critical section. Fails with [`Error::Resetting`] while a controller
    /// reset runs (requeue and retry) and [`Error::NotOperational`] when the controller is down.
    /// [`Self::begin_submit_on`] lane 0: for the admin path and tests; the I/O path names its CPU.
    pub fn begin_submit(&self) -> Result<SubmitGuard<'_>, Error> {
        self.begin_submit_on(0)
    }

    /// [`Self::begin_submit`] through lane `lane` of the submission gate (the submitting CPU:
    /// each CPU's count on its own cache line, folded into [`SUBMIT_LANES`]).
    #[inline]
    pub fn begin_submit_on(&self, lane: usize) -> Result<SubmitGuard<'_>, Error> {
        // Either the reset sees this submitter's count, or this submitter sees the gate closed
        // (`drvkit::gate`, Dekker's pattern).
        let Some(inside) = self.submit_gate.try_enter(lane) else {
            return Err(Error::Resetting);
        };
        let guard = SubmitGuard { _inside: inside };
        if !self.is_operational() {
            return Err(Error::NotOperational);
        }
        Ok(guard)
    }

    /// Submits one I/O on `tag` (the MFI context carries the tag in its low 15 bits). Validates
    /// the request first (target, range, segments): an invalid one never reaches the device.
    /// Completion is reported by [`Self::reap`].
    pub fn submit(&self, tag: u16, req: &IoRequest<'_>) -> Result<(), Error> {
        let guard = self.begin_submit()?;
        self.submit_cookie(&guard, tag, req, 0)
    }

    /// [`Self::submit`] inside a critical section already entered, remembering `cookie` for the
    /// completion ([`Done::cookie`]). The tag goes FREE -> PREPARED while the frame is built and
    /// POSTED just before the doorbell, so no reply can match it before the frame is posted.
    pub fn submit_cookie(
        &self,
        guard: &SubmitGuard<'_>,
        tag: u16,
        req: &IoRequest<'_>,
        cookie: u64,
    ) -> Result<(), Error> {
        let checked = self.check(guard, req)?;
        self.submit_checked(guard, tag, &checked, cookie)
    }

    /// [`Self::submit_cookie`] of a request [`Self::check`] validated in the same critical
    /// section (what it checked against does not change meanwhile: the drive table is filled by
    /// [`Self::discover`] at bring-up, before any I/O).
    pub fn submit_checked(
        &self,
        _guard: &SubmitGuard<'_>,
        tag: u16,
        checked: &CheckedRequest<'_>,
        cookie: u64,
    ) -> Result<(), Error> {
        let (req, block_size) = (checked.req, checked.block_size);
        // The tag's record, bounds-checked once for the whole submission.
        let Some(entry) = self.tags.entry(tag) else {
            return Err(Error::TagOutOfRange { tag, tags: self.ntags });
        };
        let generation = entry.claim(tag)?;
        entry.set_cookie(cookie);
        let context = tags::encode_context(tag, generation, false);
        let w = self.frame(tag);
        let sense = self.sense_phys(tag);
        // A stale response code must not decode as fresh sense if the device writes none.
        self.pool.write_u64(self.sense_off + usize::from(tag) * SENSE_LEN, 0);
        let frame_bytes = match req.op {
            IoOp::Read | IoOp::Write if req.system_pd => {
                // A JBOD disk: SCSI READ(16)/WRITE(16) through PD pass-through, as Linux's
                // megasas_build_dcdb does for system PDs (no LD READ/WRITE frame for a PD).
                let (opcode, dir) = if req.op == IoOp::Read {
                    (0x88, frame::FLAG_DIR_READ)
                } else {
                    (0x8A, frame::FLAG_DIR_WRITE)
                };
                w.header(&Header {
                    cmd: frame::CMD_PD_SCSI_IO,
                    sense_len: SENSE_LEN as u8,
                    target: req.target,
                    cdb_len: 16,
                    sge_count: req.sgl.len() as u8,
                    context,
                    flags: frame::FLAG_SGL64 | frame::FLAG_SENSE64 | dir,
                    // Pass-through counts bytes (validated to fit u32 by the transfer limit).
                    data_len: req.blocks * block_size,
                });
                w.u64_at(0x18, sense);
                w.bytes_at(0x20, &frame::cdb_rw16(opcode, req.lba, req.blocks));
                w.sgl64(frame::PASS_SGL, req.sgl);
                frame::PASS_SGL + req.sgl.len() * frame::SGE64_LEN
            }
            IoOp::Read | IoOp::Write => {
                let (cmd, dir) = if req.op == IoOp::Read {
                    (frame::CMD_LD_READ, frame::FLAG_DIR_READ)
                } else {
                    (frame::CMD_LD_WRITE, frame::FLAG_DIR_WRITE)
                };
                let header = Header {
                    cmd,
                    sense_len: SENSE_LEN as u8,
                    target: req.target,
                    // Harmless on 7.2.16+, required by 7.2.0-7.2.15.
                    cdb_len: 16,
                    sge_count: req.sgl.len() as u8,
                    context,
                    flags: frame::FLAG_SGL64 | frame::FLAG_SENSE64 | dir,
                    // LD READ/WRITE count blocks, not bytes.
                    data_len: req.blocks,
                };
                if let [segment] = req.sgl {
                    // The common single-segment I/O: the whole frame in one run of stores.
                    w.ld_io_one_segment(&header, sense, req.lba, segment);
                } else {
                    w.header(&header);
                    w.u64_at(0x18, sense);
                    w.u64_at(0x20, req.lba);
                    w.sgl64(frame::IO_SGL, req.sgl);
                }
                frame::IO_SGL + req.sgl.len() * frame::SGE64_LEN
            }
            IoOp::Flush => {
                // Zero-data commands still need one SGE on QEMU.
                let dummy = Segment {
                    phys: self.pool.phys_at(self.dummy_off),
                    len: 1,
                };
                w.header(&Header {
                    cmd: if req.system_pd {
                        frame::CMD_PD_SCSI_IO
                    } else {
                        frame::CMD_LD_SCSI_IO
                    },
                    sense_len: SENSE_LEN as u8,
                    target: req.target,
                    cdb_len: 10,
                    sge_count: 1,
                    context,
                    flags: frame::FLAG_SGL64 | frame::FLAG_SENSE64,
                    data_len: 0,
                });
                w.u64_at(0x18, sense);
                w.bytes_at(0x20, &frame::cdb_synchronize_cache10());
                w.sgl64(frame::PASS_SGL, &[dummy]);
                frame::PASS_SGL + frame::SGE64_LEN
            }
        };
        entry.set_frame_len(frame_bytes as u32);
        entry.publish(tags::POSTED, generation);
        self.post(tag, frame_bytes);
        Ok(())
    }

    /// [`Self::submit_checked`] of a one-segment logical drive read or write that
    /// [`Self::check_ld_io`] validated in the same critical section: the same frame, the same
    /// tag states, posted from registers: the block binding's common I/O, without an [`IoRequest`]
    /// and a [`CheckedRequest`] on the stack and a call.
    #[inline(always)]
    pub fn submit_ld_io(
        &self,
        _guard: &SubmitGuard<'_>,
        tag: u16,
        checked: CheckedLdIo,
        cookie: u64,
    ) -> Result<(), Error> {
        let io = checked.0;
        let Some(entry) = self.tags.entry(tag) else {
            return Err(Error::TagOutOfRange { tag, tags: self.ntags });
        };
        let generation = entry.claim(tag)?;
        entry.set_cookie(cookie);
        let (cmd, dir) = if io.write {
            (frame::CMD_LD_WRITE, frame::FLAG_DIR_WRITE)
        } else {
            (frame::CMD_LD_READ, frame::FLAG_DIR_READ)
        };
        let sense = self.sense_phys(tag);
        // A stale response code must not decode as fresh sense if the device writes none.
        self.pool.write_u64(self.sense_off + usize::from(tag) * SENSE_LEN, 0);
        let header = Header {
            cmd,
            sense_len: SENSE_LEN as u8,
            target: io.target,
            // Harmless on 7.2.16+, required by 7.2.0-7.2.15.
            cdb_len: 16,
            sge_count: 1,
            context: tags::encode_context(tag, generation, false),
            flags: frame::FLAG_SGL64 | frame::FLAG_SENSE64 | dir,
            // LD READ/WRITE count blocks, not bytes.
            data_len: io.blocks,
        };
        self.frame(tag).ld_io_one_segment(&header, sense, io.lba, &io.segment);
        const FRAME_BYTES: usize = frame::IO_SGL + frame::SGE64_LEN;
        entry.set_frame_len(FRAME_BYTES as u32);
        entry.publish(tags::POSTED, generation);
        self.post(tag, FRAME_BYTES);
        Ok(())
    }

    /// Posts the I/O frame of `tag` again, unchanged but for a new generation: for a command the
    /// device answered BUSY. Only the owner of the tag may call it, after the command's
    /// completion was reported (the tag is FREE and its frame still holds the request).
    pub fn resubmit(&self, _guard: &SubmitGuard<'_>, tag: u16) -> Result<(), Error> {
        let Some(entry) = self.tags.entry(tag) else {
            return Err(Error::TagOutOfRange { tag, tags: self.ntags });
        };
        let frame_bytes = entry.frame_len() as usize;
        if frame_bytes == 0 {
            return Err(Error::InvalidRequest {
                reason: "resubmit of a tag that never carried an I/O frame",
            });
        }
        let generation = entry.claim(tag)?;
        let w = self.frame(tag);
        w.u32_at(0x08, tags::encode_context(tag, generation, false));
        // Status back to pending, sense length back to the buffer size, old sense cleared.
        w.bytes_at(frame::OFF_SENSE_LEN, &[SENSE_LEN as u8, MfiStatus::PENDING.0, 0]);
        self.pool.write_u64(self.sense_off + usize::from(tag) * SENSE_LEN, 0);
        entry.publish(tags::POSTED, generation);
        self.post(tag, frame_bytes);
        Ok(())
    }

    /// INTx only: whether the (possibly shared) interrupt is ours; if so it is acknowledged by
    /// writing OSTS back to ODCR0, before the queue is drained (the doorbell is a counter the ack zeroes).
    pub fn intx_claim(&self) -> bool {
        let status = self.mmio.read32(regs::OSTS);
        if status & self.model.intx_pending_bits() == 0 {
            return false;
        }
        self.mmio.write32(regs::ODCR0, status);
        true
    }

    /// Interrupt entry point: acknowledges as `mode` requires and drains the reply queue.
    /// Returns `None` when an INTx interrupt was not ours.
    pub fn handle_interrupt(&self, mode: IrqMode, mut complete: impl FnMut(u16, IoStatus)) -> Option<Reaped> {
        self.handle_interrupt_with(mode, |d| complete(d.tag, d.status))
    }

    /// [`Self::handle_interrupt`] reporting each completion as a [`Done`].
    pub fn handle_interrupt_with(&self, mode: IrqMode, complete: impl FnMut(Done)) -> Option<Reaped> {
        // MSI/MSI-X: OSTS reads 0 there, so it says nothing about whether work arrived.
        if mode == IrqMode::Intx && !self.intx_claim() {
            return None;
        }
        Some(self.reap_with(complete))
    }

    /// Whether the reply ring holds entries not yet reaped (a memory read, no register access).
    pub fn replies_pending(&self) -> bool {
        // Acquire pairs with the device's producer store, made after the entries.
        let pi = self.ring.atomic_u32(RING_PI).load(Ordering::Acquire);
        pi != self.ci.load(Ordering::Relaxed) && pi < self.ring_entries
    }

    /// Drains the reply queue: every context is validated (range, in flight, generation, frame
    /// status written) before it completes anything; a bad one is counted and logged as a
    /// controller fault and skipped. `complete(tag, status)` runs for each accepted completion,
    /// after the tag has been handed back (so it may resubmit on the same tag).
    pub fn reap(&self, mut complete: impl FnMut(u16, IoStatus)) -> Reaped {
        self.reap_with(|d| complete(d.tag, d.status))
    }

    /// [`Self::reap`] reporting each completion as a [`Done`] (with its cookie and whether an
    /// abort was pending). Also handles the replies of ABORT frames.
    pub fn reap_with(&self, complete: impl FnMut(Done)) -> Reaped {
        self.reap_budget(u32::MAX, complete)
    }

    /// [`Self::reap_with`] consuming at most `max_entries` reply entries (accepted or not), so
    /// an interrupt handler's work is bounded; `more_pending` says entries were left.
    pub fn reap_budget(&self, max_entries: u32, mut complete: impl FnMut(Done)) -> Reaped {
        let pi_word = self.ring.atomic_u32(RING_PI);
        // Nothing produced since the last consumed entry: nothing to take, and nothing a gate
        // holder needs to be told about (an empty poll does not take the gate, zero the
        // result or store the consumer index back). `ci` never passes `pi`, so a `ci` read while
        // another context drains can equal `pi` only when everything is consumed; a producer
        // index out of range still goes through `drain`, which records it as a fault.
        // Acquire pairs with the device's producer store, as in `drain`.
        if pi_word.load(Ordering::Acquire) == self.ci.load(Ordering::Relaxed) {
            return Reaped::default();
        }
        let mut out = Reaped::default();
        let remaining = core::cell::Cell::new(max_entries);
        let work_left = || {
            let pi = pi_word.load(Ordering::Acquire);
            pi != self.ci.load(Ordering::Relaxed) && pi < self.ring_entries
        };
        let outcome = {
            let out = &mut out;
            let complete = &mut complete;
            // Bounded so an interrupt handler cannot be held forever by a device that keeps
            // producing; `more_pending` tells the caller to come back.
            self.gate.run(
                MAX_REAP_ROUNDS,
                || self.drain(out, complete, &remaining),
                || remaining.get() > 0 && work_left(),
            )
        };
        out.contended = outcome == GateOutcome::Contended;
        out.more_pending = outcome == GateOutcome::MorePending
            || (outcome == GateOutcome::Idle && remaining.get() == 0 && work_left());
        out
    }

    fn record_fault(&self, out: &mut Reaped, fault: Fault) {
        out.faults += 1;
        out.first_fault.get_or_insert(fault);
        let n = self.faults.fetch_add(1, Ordering::Relaxed);
        // Rate limit: a hostile device must not flood the console. The count stays exact.
        if n < FAULT_LOG_FIRST {
            log::error!("megasas: controller fault: {fault}");
        } else if n == FAULT_LOG_FIRST {
            log::error!("megasas: controller fault: {fault}; further faults are counted, not logged one by one");
        }
    }

    /// Consumes entries from CI up to PI; the caller holds `gate`.
    fn drain(&self, out: &mut Reaped, complete: &mut impl FnMut(Done), remaining: &core::cell::Cell<u32>) {
        let entries = self.ring_entries;
        let mut ci = self.ci.load(Ordering::Relaxed);
        // Bounded: each pass consumes at most one ring's worth; the outer loop re-reads PI.
        'passes: for _ in 0..2 {
            // Acquire pairs with the device's producer store, made after the entries and frames.
            let pi = self.ring.atomic_u32(RING_PI).load(Ordering::Acquire);
            if pi >= entries {
                self.record_fault(out, Fault::ProducerOutOfRange { producer: pi, entries });
                break;
            }
            if pi == ci {
                break;
            }
            while ci != pi {
                if remaining.get() == 0 {
                    break 'passes;
                }
                remaining.set(remaining.get() - 1);
                let slot = self.ring.atomic_u32(RING_ENTRIES + 4 * ci as usize);
                let ctx = slot.load(Ordering::Relaxed);
                slot.store(RING_SENTINEL, Ordering::Relaxed);
                if let Err(reason) = self.accept(ctx, out, complete) {
                    self.record_fault(
                        out,
                        Fault::BogusContext {
                            context: ctx,
                            slot: ci,
                            reason,
                        },
                    );
                }
                ci = if ci + 1 == entries { 0 } else { ci + 1 };
            }
        }
        self.ci.store(ci, Ordering::Relaxed);
        // The device may read CI (QEMU does not compare it, real firmware may).
        self.ring.atomic_u32(RING_CI).store(ci, Ordering::Release);
    }

    /// Validates one context and completes its command.
    fn accept(&self, ctx: u32, out: &mut Reaped, complete: &mut impl FnMut(Done)) -> Result<(), BogusReason> {
        let (tag, polled, generation) = tags::decode_context(ctx);
        // The tag's record, bounds-checked once for the whole reply. The context's
        // tag field is 15 bits, so it fits a u16.
        let Some(entry) = self.tags.entry(tag as u16) else {
            return Err(BogusReason::TagOutOfRange { tag, tags: self.ntags });
        };
        let tag = tag as u16;
        if polled {
            // QEMU posts polled commands too (it ignores DONT_POST); their poller owns them and
            // the echo is dropped. It must name one of the tag's recent generations (several
            // polled commands may finish before the reaper runs, and the tag may be FREE again);
            // anything else is invented and counted. The current generation is an echo only if
            // its command is polled or done; an older one whatever the tag does now: the tag may
            // already be claimed again (the next polled command's frame being built, an ABORT
            // frame), and an echo completes nothing.
            let (state, current) = entry.load();
            let behind = current.wrapping_sub(generation);
            let plausible = if behind == 0 {
                matches!(state, tags::POLLED | tags::FREE | tags::QUARANTINED)
            } else {
                behind < POLLED_ECHO_WINDOW
            };
            if !plausible {
                return Err(BogusReason::StaleGeneration {
                    tag,
                    expected: current,
                    found: generation,
                });
            }
            out.polled_echoes += 1;
            return Ok(());
        }
        let base = usize::from(tag) * self.frame_stride;
        let frame_status = || {
            // Acquire pairs with the device's store of the status byte, after sense and data.
            MfiStatus(
                self.pool
                    .atomic_u8(base + frame::OFF_CMD_STATUS)
                    .load(Ordering::Acquire),
            )
        };
        let (state, current) = entry.load();
        if state == tags::ABORT_FRAME {
            if current != generation {
                return Err(BogusReason::StaleGeneration {
                    tag,
                    expected: current,
                    found: generation,
                });
            }
            let mfi = frame_status();
            if mfi == MfiStatus::PENDING {
                return Err(BogusReason::StatusPending { tag });
            }
            self.abort_replied(tag, generation, mfi, out, complete);
            return Ok(());
        }
        // The word read above (Acquire) is the one `check` would read again.
        TagTable::check_loaded(tag, (state, current), generation)?;
        let mfi = frame_status();
        if mfi == MfiStatus::PENDING {
            return Err(BogusReason::StatusPending { tag });
        }
        // A success reads nothing more of the frame: `IoError::classify` is `None` for MFI OK
        // whatever the SCSI status and sense, so no 64-byte sense copy per I/O.
        let ok = mfi == MfiStatus::OK;
        let status = if ok {
            IoStatus::Success
        } else {
            match self.read_completion(tag, mfi).error() {
                None => IoStatus::Success,
                Some(e) => {
                    log::warn!("megasas: tag {tag}: {e}");
                    IoStatus::Failed(e)
                }
            }
        };
        // The cookie cannot change before the tag is FREE again, which `complete` below does.
        let cookie = entry.cookie();
        let accepted = entry.complete(tag, generation)?;
        let aborted = accepted == tags::Accepted::Aborting;
        if aborted {
            // The device gave the command up (or finished it) while an abort was pending.
            self.aborts_confirmed.fetch_add(1, Ordering::Relaxed);
        }
        out.completed += 1;
        if ok && !aborted {
            // The common reply, with its status a constant for the callback.
            complete(Done {
                tag,
                cookie,
                status: IoStatus::Success,
                aborted: false,
            });
        } else {
            complete(Done {
                tag,
                cookie,
                status,
                aborted,
            });
        }
        Ok(())
    }

    /// The reply of an ABORT frame. On QEMU the aborted command's own reply (0x2E) comes first,
    /// so the victim is normally already complete; if it is still in flight, an OK from the
    /// device means it gave the command up (the victim is completed as aborted here), anything
    /// else means the abort failed and the controller must be reset.
    fn abort_replied(
        &self,
        tag: u16,
        generation: u16,
        mfi: MfiStatus,
        out: &mut Reaped,
        complete: &mut impl FnMut(Done),
    ) {
        let victim = self.abort_victim.load(Ordering::Relaxed);
        let (vtag, vgen) = ((victim & 0xFFFF) as u16, (victim >> 16) as u16);
        if self.tags.load(vtag) == (tags::ABORTING, vgen) {
            if mfi == MfiStatus::OK {
                let cookie = self.tags.cookie(vtag);
                if self.tags.complete(vtag, vgen).is_ok() {
                    self.aborts_confirmed.fetch_add(1, Ordering::Relaxed);
                    out.completed += 1;
                    complete(Done {
                        tag: vtag,
                        cookie,
                        status: IoStatus::Failed(IoError {
                            kind: IoErrorKind::Aborted,
                            mfi_status: MfiStatus::SCSI_IO_FAILED,
                            scsi_status: 0,
                            sense: None,
                        }),
                        aborted: true,
                    });
                }
            } else {
                log::error!("megasas: ABORT of tag {vtag} refused with {mfi}; the controller will be reset");
                self.aborts_failed.fetch_add(1, Ordering::Relaxed);
                self.reset_requested.store(true, Ordering::Release);
            }
        }
        self.tags.finish(tag, generation);
    }
}

/// A data segment must have an address and a length (`index` names it in the error).
#[inline(always)]
fn check_segment(index: usize, s: &Segment) -> Result<(), Error> {
    if s.phys == 0 || s.len == 0 {
        return Err(Error::BadSegment {
            index,
            phys: s.phys,
            len: s.len,
        });
    }
    Ok(())
}

/// Try-lock of the single admin buffer.
struct AdminGuard<'a>(&'a AtomicBool);

impl<'a> AdminGuard<'a> {
    fn take(flag: &'a AtomicBool) -> Result<Self, Error> {
        // Acquire pairs with the Release in `drop`: the previous user's buffer reads are done.
        if flag.swap(true, Ordering::Acquire) {
            return Err(Error::AdminBusy);
        }
        Ok(Self(flag))
    }
}

impl Drop for AdminGuard<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// Printable device table: controller line plus one row per logical drive.
pub struct DriveTable<'a> {
    /// Controller information.
    pub info: &'a ControllerInfo,
    /// Drives to list.
    pub drives: &'a [LogicalDrive],
}

impl fmt::Display for DriveTable<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "megasas: {} (fw {})", self.info.product, self.info.firmware)?;
        writeln!(f, "  target  block      blocks          bytes   MiB  state")?;
        for d in self.drives {
            writeln!(
                f,
                "  {:>6}  {:>5}  {:>10}  {:>13}  {:>5}  {}",
                d.target,
                d.block_size,
                d.blocks,
                d.capacity_bytes(),
                d.capacity_bytes() >> 20,
                if d.system_pd {
                    "JBOD disk (system PD)"
                } else if d.state == 3 {
                    "optimal"
                } else {
                    "not optimal"
                }
            )?;
        }
        Ok(())
    }
}
