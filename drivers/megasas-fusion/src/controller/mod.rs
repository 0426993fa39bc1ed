//! The Fusion controller: bring-up, IOC INIT, pass-through DCMDs, LD I/O, reply queues, OCR.
//!
//! Concurrency: submitters and reapers enter `gate` through their reply queue's lane (a refusal,
//! never a spin, while a reset runs); an online controller reset closes it, so it owns the
//! controller exclusively (`drvkit::gate`: a count per lane, not one reader count that every
//! CPU's every I/O would write). A request descriptor is one 64-bit register write (or one 32-bit
//! write to Aero's atomic port), so posts need no lock; each reply queue has its own lock. A SMID's slot state is an atomic word
//! (generation and in-flight bit) so a reply for a SMID that is not in flight is recognised as
//! bogus and dropped.

use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering, fence};

use crate::slot::SmidSlot;

use crate::Mmio64;
use devhal::{Delay, Dma, Mmio};
use megasas::dcmd::{self, Capacity, ControllerInfo, LdListEntry};
use megasas::{IoError, IoErrorKind, MfiStatus, Segment};
use spin::Mutex;

use drvkit::gate::{Gate, Inside};

use crate::diag::Report;
use crate::error::{Error, Sp0};
use crate::mem::alloc_low;
use crate::regs::{self, FwState, FwStatus, Generation, Sp1};
use devhal::DmaBuf;

/// Bytes per request frame (IOC INIT SystemRequestFrameSize 64 dwords).
pub const FRAME_SIZE: usize = 256;
/// Bytes per sense slot.
pub const SENSE_SIZE: usize = 96;
/// SMIDs kept for MFI pass-through (DCMDs), above the I/O SMIDs.
pub const DCMD_SMIDS: u16 = 4;
/// Bytes of the DCMD data buffer of each DCMD SMID (Linux's largest list DCMD, PD_LIST_QUERY,
/// uses 8192 B).
const DCMD_DATA_LEN: usize = 8192;
/// CTRL_GET_INFO buffer: Linux's and FreeBSD's `megasas_ctrl_info` (0x950 bytes).
pub const CTRL_INFO_LEN: usize = 0x950;
/// LD_GET_LIST buffer: `MR_LD_LIST` with 256 entries (4104 bytes), as Linux and FreeBSD.
pub const LD_LIST_LEN: usize = 8 + 256 * 16;
/// Bytes of the MFI frame of each DCMD SMID.
const MFI_FRAME_LEN: usize = 256;
/// Largest `max_fw_cmds` the driver uses; keeps the reply depth within its u16 field.
const MAX_FW_CMDS_CAP: u16 = 8191;
/// Largest SGE count per request the driver uses.
const MAX_SGE_CAP: u16 = 256;
/// Offsets in the I/O frame (MPI2 RAID SCSI IO request, `mpi2.h` and Linux's `fusion.h`).
const F_DEV_HANDLE: usize = 0x00;
const F_CHAIN_OFFSET: usize = 0x02;
const F_FUNCTION: usize = 0x03;
const F_SENSE_LOW: usize = 0x0C;
const F_SGL_FLAGS: usize = 0x10;
const F_SENSE_LEN: usize = 0x12;
const F_SGL_OFFSET0: usize = 0x14;
const F_DATA_LEN: usize = 0x1C;
const F_IO_FLAGS: usize = 0x24;
const F_CONTROL: usize = 0x3C;
const F_CDB: usize = 0x40;
const F_RAID_CTX: usize = 0x60;
const F_EX_STATUS: usize = 0x76;
/// MFI status (out), the byte after `F_EX_STATUS`: `dispatch` reads both with one word load.
const F_STATUS: usize = 0x77;
const _: () = assert!(F_STATUS == F_EX_STATUS + 1 && (F_EX_STATUS - 2).is_multiple_of(4));
const F_SGL: usize = 0x80;
/// Bytes per SGE (IEEE 64-bit); the main frame holds 8.
const SGE_SIZE: usize = 16;
/// Functions.
pub(crate) const FUNC_LD_IO: u8 = 0xF1;
pub(crate) const FUNC_MFI_PASSTHRU: u8 = 0xF0;
/// MPI2 SCSI IO (FastPath; the system-PD path).
pub(crate) const FUNC_SCSI_IO: u8 = 0x00;
/// IoFlags: FastPath (Invader and later).
const IO_FLAGS_FAST_PATH: u16 = 0x4000;
/// RAID-context raid_flags: IO sub-type SYSTEM_PD (bits 5:4 = 1).
const RAID_FLAGS_SYSTEM_PD: u8 = 0x10;
/// PD_LIST_QUERY and its mailbox byte 0 for the PDs exposed to the host (system PDs).
pub const DCMD_PD_LIST_QUERY: u32 = 0x0201_0100;
const PD_QUERY_EXPOSED_TO_HOST: u8 = 5;
/// Control words.
const CONTROL_WRITE: u32 = 0x0100_0000;
const CONTROL_READ: u32 = 0x0200_0000;
/// SGE flags.
pub(crate) const SGE_CHAIN: u8 = 0x80;
pub(crate) const SGE_END_OF_LIST: u8 = 0x40;
/// DCMD opcodes.
pub const DCMD_CTRL_GET_INFO: u32 = 0x0101_0000;
/// LD_GET_LIST.
pub const DCMD_LD_GET_LIST: u32 = 0x0301_0000;
/// CTRL_CACHE_FLUSH.
pub const DCMD_CACHE_FLUSH: u32 = 0x0110_1000;
/// CTRL_SHUTDOWN.
pub const DCMD_SHUTDOWN: u32 = 0x0105_0000;
/// MFI frame flags: data in, and 64-bit SGEs.
const MFI_DIR_READ: u16 = 0x0010;
const MFI_SGL64: u16 = 0x0002;
/// Reply descriptor value of an unused slot.
const UNUSED_REPLY: u64 = u64::MAX;
/// Offset of the IOC INIT request inside the init region (after the 256-aligned MFI frame).
const INIT_REQUEST_OFF: usize = 0x100;
/// How long after IOC INIT's cmd_status 0 the driver waits for SP0 to show OPERATIONAL.
const OPERATIONAL_WAIT_US: u64 = 10_000_000;
/// Zero-read retries on Aero (Linux's `megasas_readl` errata loop).
const AERO_ZERO_READ_RETRIES: usize = 30;

/// A driver mistake to commit on purpose (test hook proving the fake controller is strict).
/// Never set outside tests.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mistake {
    PostBeforeOperational,
    InitViaAtomicPort,
    InitTwice,
    InitFrameMisaligned,
    InitStatusNotPreset,
    ReplySlotsNotReset,
    SmidZero,
    SmidBeyondPool,
    RepostOutstanding,
    GarbageFunction,
    HighWithoutLow,
    LowTwice,
    MsixIndexOutOfRange,
    DescriptorMismatch,
    FastPathWithoutMap,
    BadChainOffset,
    ChainOffsetWithoutChain,
    ChainLengthWrong,
    ChainNotInSlot7,
    NestedChain,
    MissingEndOfList,
    EarlyEndOfList,
    NumSgeWrong,
    SglSumWrong,
    IgnoreMaxSge,
    ZeroLengthSge,
    WrongDirection,
    DataLengthWrong,
    SenseOutsidePool,
    SenseLengthZero,
    NoHostIndexWrite,
    HostIndexWrongQueue,
    HostIndexWrongRegister,
    HostIndexNoWrap,
    HostIndexAhead,
    SlotsNotRestored,
    LeakDcmdSmid,
    PostDuringReset,
    QueuesNotResetAfterOcr,
    LastIdxNotZeroed,
    SenseAbove4G,
    AllOnesAddress,
    DoorbellWrongState,
    IgnoreDoorbellBusy,
    AtomicWithoutSupport,
    DcmdOffQueue0,
    RdpqWithoutSupport,
    QueueDepthNotMultipleOf16,
    TooManyVectors,
    /// Behaviours Linux and FreeBSD avoid (combined mode from the host's queue count, read/write
    /// RAID-context fields on other LD commands, QEMU's MFI DCMD buffer sizes, an SGE on a no-data
    /// DCMD, a system-PD request without the FastPath flag), kept as hooks so the model's checks
    /// for them stay proven.
    CombinedByHostCount,
    RwContextOnNonRw,
    QemuDcmdSizes,
    NoDataDcmdWithSge,
    SystemPdWithoutFastPathFlag,
}

impl Mistake {
    /// Every variant (the mistakes test checks each has a test, and that this list is complete).
    pub const ALL: [Mistake; 54] = [
        Mistake::PostBeforeOperational,
        Mistake::InitViaAtomicPort,
        Mistake::InitTwice,
        Mistake::InitFrameMisaligned,
        Mistake::InitStatusNotPreset,
        Mistake::ReplySlotsNotReset,
        Mistake::SmidZero,
        Mistake::SmidBeyondPool,
        Mistake::RepostOutstanding,
        Mistake::GarbageFunction,
        Mistake::HighWithoutLow,
        Mistake::LowTwice,
        Mistake::MsixIndexOutOfRange,
        Mistake::DescriptorMismatch,
        Mistake::FastPathWithoutMap,
        Mistake::BadChainOffset,
        Mistake::ChainOffsetWithoutChain,
        Mistake::ChainLengthWrong,
        Mistake::ChainNotInSlot7,
        Mistake::NestedChain,
        Mistake::MissingEndOfList,
        Mistake::EarlyEndOfList,
        Mistake::NumSgeWrong,
        Mistake::SglSumWrong,
        Mistake::IgnoreMaxSge,
        Mistake::ZeroLengthSge,
        Mistake::WrongDirection,
        Mistake::DataLengthWrong,
        Mistake::SenseOutsidePool,
        Mistake::SenseLengthZero,
        Mistake::NoHostIndexWrite,
        Mistake::HostIndexWrongQueue,
        Mistake::HostIndexWrongRegister,
        Mistake::HostIndexNoWrap,
        Mistake::HostIndexAhead,
        Mistake::SlotsNotRestored,
        Mistake::LeakDcmdSmid,
        Mistake::PostDuringReset,
        Mistake::QueuesNotResetAfterOcr,
        Mistake::LastIdxNotZeroed,
        Mistake::SenseAbove4G,
        Mistake::AllOnesAddress,
        Mistake::DoorbellWrongState,
        Mistake::IgnoreDoorbellBusy,
        Mistake::AtomicWithoutSupport,
        Mistake::DcmdOffQueue0,
        Mistake::RdpqWithoutSupport,
        Mistake::QueueDepthNotMultipleOf16,
        Mistake::TooManyVectors,
        Mistake::CombinedByHostCount,
        Mistake::RwContextOnNonRw,
        Mistake::QemuDcmdSizes,
        Mistake::NoDataDcmdWithSge,
        Mistake::SystemPdWithoutFastPathFlag,
    ];
}

/// Driver configuration the kernel fills in.
#[derive(Clone, Debug)]
pub struct Config {
    /// Generation, from [`crate::match_pci`].
    pub generation: Generation,
    /// MSI-X vectors granted, vector i aimed at CPU `vector_cpus[i]`. Empty: INTx or polling
    /// with one reply queue (HostMSIxVectors 0).
    pub vector_cpus: Vec<usize>,
    /// Overall bring-up deadline (sum of all waits), microseconds.
    pub bringup_budget_us: u64,
    /// Longest wait in one firmware state, microseconds (Linux allows 180 s).
    pub state_timeout_us: u64,
    /// Longest wait for a polled DCMD or IOC INIT, microseconds.
    pub command_timeout_us: u64,
    /// Cap on reply queues (0: none beyond firmware and vectors).
    pub max_queues: u16,
    /// Test hook: commit this mistake. It exists only in test builds (`cfg(test)` or the
    /// `fake` feature): a production build cannot set it, and every check of it is the
    /// constant `false` there (about 40 compares per I/O on the hot paths).
    #[cfg(any(test, feature = "fake"))]
    #[doc(hidden)]
    pub mistake: Option<Mistake>,
}

impl Config {
    /// Defaults: 240 s bring-up budget, 180 s per state, 180 s per polled command.
    pub fn new(generation: Generation, vector_cpus: Vec<usize>) -> Self {
        Self {
            generation,
            vector_cpus,
            bringup_budget_us: 240_000_000,
            state_timeout_us: 180_000_000,
            command_timeout_us: 180_000_000,
            max_queues: 0,
            #[cfg(any(test, feature = "fake"))]
            mistake: None,
        }
    }

    /// Whether the test hook asks for mistake `m` (always false outside test builds).
    #[inline(always)]
    fn commits(&self, m: Mistake) -> bool {
        #[cfg(any(test, feature = "fake"))]
        {
            self.mistake == Some(m)
        }
        #[cfg(not(any(test, feature = "fake")))]
        {
            let _ = m;
            false
        }
    }
}

/// Limits derived from the scratch pads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// SP0[15:0].
    pub raw_fw_cmds: u16,
    /// SMIDs 1..=max_fw_cmds exist.
    pub max_fw_cmds: u16,
    /// I/O tags (SMIDs 1..=io_tags); the top [`DCMD_SMIDS`] SMIDs carry DCMDs.
    pub io_tags: u16,
    /// Reply descriptors per queue.
    pub reply_depth: u32,
    /// Reply queues the firmware offers.
    pub fw_queues: u16,
    /// Reply queues in use.
    pub queues: u16,
    /// HostMSIxVectors given to IOC INIT.
    pub host_msix_vectors: u8,
    /// Combined (supplementary host index) mode.
    pub combined: bool,
    /// Firmware chain frame size in bytes.
    pub chain_bytes: u32,
    /// SGEs per request.
    pub max_sge: u16,
    /// SP0 bit 26.
    pub msix_capable: bool,
    /// SP1 bit 24 (FW handles SYNCHRONIZE CACHE).
    pub fw_sync_cache: bool,
    /// SP1 bit 23 (RDPQ supported; not used).
    pub rdpq_supported: bool,
    /// SP1 bit 25 (64-bit control addresses accepted; not used: all control memory is below 4 GiB).
    pub ctrl64: bool,
}

impl Limits {
    /// Derives the limits from SP0/SP1 for `generation` with `vectors` MSI-X vectors granted.
    pub fn from_scratch_pads(
        generation: Generation,
        sp0: u32,
        sp1: u32,
        vectors: usize,
        cap: u16,
    ) -> Result<Self, Error> {
        let raw = (sp0 & 0xFFFF) as u16;
        if raw < DCMD_SMIDS + 3 {
            return Err(Error::Limits {
                what: "SP0 max commands",
                value: u64::from(raw),
                expected: "at least 7",
            });
        }
        let max_fw_cmds = (raw - 1).min(MAX_FW_CMDS_CAP);
        let io_tags = max_fw_cmds - DCMD_SMIDS;
        let reply_depth = 2 * (u32::from(max_fw_cmds) + 1).next_multiple_of(16);
        let sp1 = Sp1(sp1);
        let msix_capable = sp0 & regs::SP0_MSIX_CAPABLE != 0;
        let fw_queues = if msix_capable { sp1.fw_queues(generation) } else { 1 };
        let (queues, host_msix_vectors) = if msix_capable && vectors > 0 {
            let mut q = (vectors.min(usize::from(u16::MAX)) as u16)
                .min(fw_queues)
                .min(generation.max_queues());
            if cap > 0 {
                q = q.min(cap);
            }
            (q, q as u8)
        } else {
            (1, 0)
        };
        // As Linux and FreeBSD: the *firmware's* queue count decides combined mode (more than 8
        // on Invader, 16 on Ventura/Aero); the host count is clamped afterwards.
        let combined = msix_capable && generation.combined_above().is_some_and(|c| fw_queues > c);
        let chain_bytes = sp1.chain_bytes();
        let max_sge = prev_power_of_two(6 + chain_bytes / 16).min(u32::from(MAX_SGE_CAP)) as u16;
        Ok(Self {
            raw_fw_cmds: raw,
            max_fw_cmds,
            io_tags,
            reply_depth,
            fw_queues,
            queues,
            host_msix_vectors,
            combined,
            chain_bytes,
            max_sge,
            msix_capable,
            fw_sync_cache: sp1.bit24(),
            rdpq_supported: sp1.rdpq(),
            ctrl64: sp1.ctrl64(),
        })
    }
}

fn prev_power_of_two(v: u32) -> u32 {
    if v == 0 { 0 } else { 1 << (31 - v.leading_zeros()) }
}

/// A logical drive found at bring-up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogicalDrive {
    /// Target id (DevHandle of its I/O).
    pub target: u8,
    /// Blocks.
    pub blocks: u64,
    /// Bytes per block.
    pub block_size: u32,
    /// State byte from LD_GET_LIST (0 for a system PD).
    pub state: u8,
    /// A system PD (JBOD disk from PD_LIST_QUERY); `target` is its firmware device id.
    pub system_pd: bool,
}

pub use megasas::{IoOp, IoRequest};

/// How a request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoOutcome {
    /// Success.
    Ok,
    /// The firmware reported an error.
    Failed(IoError),
    /// An online controller reset dropped the request; the controller no longer owns it (its
    /// buffer is free) and it may be re-issued.
    Reset,
}

/// A finished request, handed to the caller's sink.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    /// I/O tag (SMID − 1).
    pub tag: u32,
    /// The driver generation the tag was submitted with.
    pub generation: u32,
    /// The caller's cookie given at submit.
    pub cookie: u64,
    /// LD target id.
    pub target: u8,
    /// Outcome.
    pub outcome: IoOutcome,
    /// Bytes the firmware says it moved (DataLength after completion).
    pub bytes_done: u32,
}

/// A request [`Controller::validate`] accepted: its CDB, direction (None: no data) and byte
/// count, for [`Controller::submit_validated`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Validated {
    cdb: [u8; 16],
    write: Option<bool>,
    len: u32,
}

/// The submission section [`Controller::enter`] opened: no reset starts while it lives.
pub struct Entered<'a> {
    _inside: Inside<'a>,
}

/// What the driver keeps per SMID, together: one bounds check per submission and per reply, one
/// cache line, where five vectors would cost five of each.
struct SmidState {
    /// In flight or idle, and the generation.
    slot: SmidSlot,
    /// The caller's cookie, handed back in the [`Completion`].
    cookie: AtomicU64,
    /// Bytes a read/write must move to succeed (0 for other commands, whose residual the caller
    /// judges from `bytes_done`).
    required: AtomicU32,
    /// LD target id.
    target: AtomicU8,
    /// How many of the frame's 8 SGL slots the last use wrote (slots at and above this are
    /// zero), so a request zeroes only the slots a longer previous SGL left behind. Written
    /// and read only by the SMID's owner between claim and post: the slot's claim (AcqRel)
    /// orders it after the previous owner's store.
    sgl_slots: AtomicU8,
}

impl SmidState {
    fn new() -> Self {
        Self {
            slot: SmidSlot::new(),
            cookie: AtomicU64::new(0),
            required: AtomicU32::new(0),
            target: AtomicU8::new(0),
            // The frame pool starts zeroed.
            sgl_slots: AtomicU8::new(0),
        }
    }
}

/// Counters of unusual events.
#[derive(Debug, Default)]
pub struct Stats {
    /// Replies naming a SMID out of range or not in flight (dropped).
    pub bogus_replies: AtomicU64,
    /// Online controller resets completed.
    pub resets: AtomicU64,
    /// Requests returned by resets.
    pub reset_returned: AtomicU64,
    /// Reply walks that stopped at the per-call bound with work left.
    pub walk_bound_hits: AtomicU64,
}

struct ReplyQueue {
    last_idx: u32,
    /// The index has wrapped at least once (only the `HostIndexNoWrap` test hook uses it).
    wrapped: bool,
}

/// Result of an INTx interrupt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IntxResult {
    /// Neither status bit set: another device's interrupt.
    NotOurs,
    /// Replies reaped (count).
    Handled(usize),
    /// The firmware is in FAULT: start a reset.
    Fault(u32),
}

/// Health seen by the watchdog.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Health {
    /// OPERATIONAL.
    Ok,
    /// Needs a reset (FAULT or not OPERATIONAL); SP0 given.
    NeedsReset(u32),
    /// Given up.
    Dead,
}

struct Memory {
    frames: DmaBuf,
    chains: DmaBuf,
    chain_stride: usize,
    sense: DmaBuf,
    replies: DmaBuf,
    init: DmaBuf,
    dcmd: DmaBuf,
}

/// Waits charged against one overall deadline.
pub(crate) struct Budget {
    used: u64,
    limit: u64,
}

impl Budget {
    pub(crate) fn new(limit: u64) -> Self {
        Self { used: 0, limit }
    }
    pub(crate) fn used(&self) -> u64 {
        self.used
    }
}

/// A Fusion controller after bring-up.
pub struct Controller<M: Mmio64, D: Delay> {
    mmio: M,
    delay: D,
    config: Config,
    generation: Generation,
    limits: Limits,
    mem: Memory,
    queues: Vec<Mutex<ReplyQueue>>,
    /// Per SMID (index = SMID).
    smids: Vec<SmidState>,
    /// Per DCMD SMID: its late reply has not been consumed yet.
    dcmd_reply_pending: Vec<AtomicBool>,
    dcmd_lock: Mutex<()>,
    /// Submitters and reapers inside, or a reset alone; a lane per reply queue (`gate`).
    gate: Gate,
    atomic_port: AtomicBool,
    interrupts_enabled: AtomicBool,
    dead: AtomicBool,
    ocr_disabled: bool,
    /// CTRL_GET_INFO says the firmware supports 256 LDs (max_lds > 64 or supportMaxExtLDs).
    ext_lds: bool,
    info: ControllerInfo,
    drives: Vec<LogicalDrive>,
    /// Counters.
    pub stats: Stats,
}

// ----- small helpers -----

fn sge_bytes(addr: u64, len: u32, flags: u8) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[0..8].copy_from_slice(&addr.to_le_bytes());
    b[8..12].copy_from_slice(&len.to_le_bytes());
    b[15] = flags;
    b
}

fn cdb16(opcode: u8, lba: u64, blocks: u32) -> [u8; 16] {
    let mut c = [0u8; 16];
    c[0] = opcode;
    c[2..10].copy_from_slice(&lba.to_be_bytes());
    c[10..14].copy_from_slice(&blocks.to_be_bytes());
    c
}

const READ_CAPACITY16_LEN: u32 = 32;

/// The first 128 bytes of a request frame (everything before the SGL), composed on the stack
/// field by field and then written to the SMID's DMA frame as one run of stores
/// (`DmaBuf::write_u32s`: one bounds check, 16 eight-byte stores). Starts zeroed; offsets are
/// the `F_*` byte offsets, little-endian as the device reads them. (The whole 256-byte frame
/// as one image cost a `memset` call and 64 copy instructions per I/O; 128 bytes are zeroed
/// inline.)
struct FrameImage([u32; F_SGL / 4]);

impl FrameImage {
    #[inline(always)]
    fn new() -> Self {
        Self([0; F_SGL / 4])
    }

    #[inline(always)]
    fn set_u8(&mut self, off: usize, v: u8) {
        let shift = 8 * (off % 4);
        let w = &mut self.0[off / 4];
        *w = (*w & !(0xFF << shift)) | (u32::from(v) << shift);
    }

    /// `off` must be 2-byte aligned (every u16 field of the frame is).
    #[inline(always)]
    fn set_u16(&mut self, off: usize, v: u16) {
        debug_assert!(off.is_multiple_of(2));
        let shift = 8 * (off % 4);
        let w = &mut self.0[off / 4];
        *w = (*w & !(0xFFFF << shift)) | (u32::from(v) << shift);
    }

    /// `off` must be 4-byte aligned.
    #[inline(always)]
    fn set_u32(&mut self, off: usize, v: u32) {
        debug_assert!(off.is_multiple_of(4));
        self.0[off / 4] = v;
    }

    /// The 16-byte CDB field (the frame's CDB is 32 bytes; the rest stays zero).
    #[inline(always)]
    fn set_cdb(&mut self, cdb: &[u8; 16]) {
        for (k, chunk) in cdb.as_chunks::<4>().0.iter().enumerate() {
            self.0[F_CDB / 4 + k] = u32::from_le_bytes(*chunk);
        }
    }
}

/// An IEEE 64-bit SGE as four little-endian words (address, length, flags in byte 15).
#[inline(always)]
fn sge_words(addr: u64, len: u32, flags: u8) -> [u32; 4] {
    [addr as u32, (addr >> 32) as u32, len, u32::from(flags) << 24]
}

impl<M: Mmio64, D: Delay> Controller<M, D> {
    /// Brings the controller up from whatever state its firmware is in: READY transition,
    /// limits, memory (all below 4 GiB), IOC INIT, CTRL_GET_INFO, LD list, READ CAPACITY of each
    /// LD. Interrupts stay masked; call [`Controller::enable_interrupts`] once handlers are
    /// installed. Every step goes into `report` (and the `log` crate) whether it succeeds or not.
    pub fn bring_up<A: Dma>(mmio: M, dma: &A, delay: D, config: Config, report: &mut Report) -> Result<Self, Error> {
        let mut budget = Budget::new(config.bringup_budget_us);
        report.generation = Some(config.generation);
        let r = Self::bring_up_inner(mmio, dma, delay, config, report, &mut budget);
        if let Err(e) = &r {
            report.fail("bring-up", e);
        }
        r
    }

    fn bring_up_inner<A: Dma>(
        mmio: M,
        dma: &A,
        delay: D,
        config: Config,
        report: &mut Report,
        budget: &mut Budget,
    ) -> Result<Self, Error> {
        let generation = config.generation;
        report.step(&mmio, generation, budget.used(), "registers at power-on", String::new());
        if config.commits(Mistake::DoorbellWrongState) {
            mmio.write32(regs::DOORBELL, regs::DB_RESET_TO_READY);
        }
        Self::to_ready(&mmio, &delay, &config, budget, report, true)?;
        let sp0 = read_reg(&mmio, generation, regs::SP0);
        let sp1 = read_reg(&mmio, generation, regs::SP1);
        let mut limits = Limits::from_scratch_pads(generation, sp0, sp1, config.vector_cpus.len(), config.max_queues)?;
        if config.commits(Mistake::TooManyVectors) {
            limits.host_msix_vectors = (limits.fw_queues + 1) as u8;
        }
        if config.commits(Mistake::CombinedByHostCount) {
            limits.combined = generation.combined_above().is_some_and(|c| limits.queues > c);
        }
        report.limits = Some(limits);
        report.step(&mmio, generation, budget.used(), "limits", alloc::format!("{limits:?}"));

        let n = usize::from(limits.max_fw_cmds);
        let chain_stride = (usize::from(limits.max_sge).saturating_sub(7) * 16)
            .next_multiple_of(64)
            .max(64);
        let depth = limits.reply_depth as usize;
        let nq = usize::from(limits.queues);
        let mem = Memory {
            frames: alloc_low(dma, "request frames", FRAME_SIZE * (n + 1), 256)?,
            chains: alloc_low(dma, "chain frames", chain_stride * n, 64)?,
            chain_stride,
            sense: alloc_low(dma, "sense buffers", SENSE_SIZE * n, 64)?,
            replies: alloc_low(dma, "reply queues", depth * 8 * nq, 64)?,
            init: alloc_low(dma, "IOC INIT frame", 4096, 256)?,
            dcmd: alloc_low(
                dma,
                "DCMD frames",
                usize::from(DCMD_SMIDS) * (MFI_FRAME_LEN + DCMD_DATA_LEN),
                256,
            )?,
        };
        report.step(
            &mmio,
            generation,
            budget.used(),
            "memory",
            alloc::format!(
                "frames {:#x} chains {:#x} sense {:#x} replies {:#x} ({} queues x {} entries) init {:#x}",
                mem.frames.phys(),
                mem.chains.phys(),
                mem.sense.phys(),
                mem.replies.phys(),
                nq,
                depth,
                mem.init.phys()
            ),
        );
        let smids = n + 1;
        let mut ctrl = Self {
            mmio,
            delay,
            generation,
            limits,
            mem,
            queues: (0..nq)
                .map(|_| {
                    Mutex::new(ReplyQueue {
                        last_idx: 0,
                        wrapped: false,
                    })
                })
                .collect(),
            smids: (0..smids).map(|_| SmidState::new()).collect(),
            dcmd_reply_pending: (0..DCMD_SMIDS).map(|_| AtomicBool::new(false)).collect(),
            dcmd_lock: Mutex::new(()),
            gate: Gate::new(nq),
            atomic_port: AtomicBool::new(false),
            interrupts_enabled: AtomicBool::new(false),
            dead: AtomicBool::new(false),
            ocr_disabled: false,
            ext_lds: false,
            info: empty_info(),
            drives: Vec::new(),
            config,
            stats: Stats::default(),
        };
        if !ctrl.config.commits(Mistake::ReplySlotsNotReset) {
            ctrl.reset_reply_queues();
        }
        if ctrl.config.commits(Mistake::PostBeforeOperational) {
            ctrl.post_descriptor(desc(regs::DESC_SCSI_IO, 0, 1));
        }
        if let Err(e) = ctrl.ioc_init(budget, report) {
            // Linux `megasas_init_adapter_fusion`: a resettable FAULT after a failed IOC INIT
            // gets one diag reset and one more IOC INIT.
            let sp0 = read_reg(&ctrl.mmio, generation, regs::SP0);
            if FwStatus(sp0).state() != FwState::Fault || sp0 & regs::SP0_FAULT_RESETTABLE == 0 {
                return Err(e);
            }
            report.step(
                &ctrl.mmio,
                generation,
                budget.used(),
                "IOC INIT failed with a resettable FAULT; one diag reset and retry",
                alloc::format!("{e}"),
            );
            Self::diag_reset(&ctrl.mmio, &ctrl.delay, &ctrl.config, budget, report)?;
            ctrl.reset_reply_queues();
            ctrl.ioc_init(budget, report)?;
        }
        if ctrl.config.commits(Mistake::InitTwice) {
            ctrl.ioc_init(budget, report)?;
        }
        ctrl.read_info(budget, report)?;
        ctrl.discover(budget, report)?;
        report.info = Some(ctrl.info.clone());
        report.drives = ctrl.drives.clone();
        report.step(
            &ctrl.mmio,
            generation,
            budget.used(),
            "bring-up complete",
            String::new(),
        );
        Ok(ctrl)
    }

    /// The READY transition (Linux's `megasas_transition_to_ready`). At probe (`probe`), a resettable FAULT is
    /// diag-reset once.
    fn to_ready(
        mmio: &M,
        delay: &D,
        config: &Config,
        budget: &mut Budget,
        report: &mut Report,
        probe: bool,
    ) -> Result<(), Error> {
        let generation = config.generation;
        let mut reset_tried = false;
        loop {
            let sp0 = read_reg(mmio, generation, regs::SP0);
            let state = FwStatus(sp0).state();
            match state {
                FwState::Ready => {
                    report.step(mmio, generation, budget.used(), "firmware READY", String::new());
                    return Ok(());
                }
                FwState::Fault => {
                    report.step(
                        mmio,
                        generation,
                        budget.used(),
                        "firmware in FAULT",
                        alloc::format!("{}", Sp0(sp0)),
                    );
                    if !probe {
                        // After an OCR's diag reset the firmware may pass through FAULT while it
                        // restarts: wait for the state to change (per-state limit), as Linux
                        // `megasas_transition_to_ready(ocr=1)` does.
                    } else {
                        if reset_tried || sp0 & regs::SP0_FAULT_RESETTABLE == 0 {
                            return Err(Error::FirmwareFault { sp0 });
                        }
                        reset_tried = true;
                        Self::diag_reset(mmio, delay, config, budget, report)?;
                        continue;
                    }
                }
                FwState::WaitHandshake => {
                    Self::doorbell(mmio, regs::DB_CLEAR_HANDSHAKE);
                }
                FwState::BootMsgPending => {
                    Self::doorbell(mmio, regs::DB_HOTPLUG);
                }
                FwState::Operational => {
                    mmio.write32(regs::INTR_MASK, regs::INTR_DISABLE_MASK);
                    Self::doorbell(mmio, regs::DB_RESET_TO_READY);
                    Self::wait_doorbell_clear(mmio, delay, config, budget)?;
                }
                FwState::Undefined
                | FwState::BbInit
                | FwState::FwInit
                | FwState::FwInit2
                | FwState::DeviceScan
                | FwState::FlushCache => {}
                FwState::Other(_) => return Err(Error::UnknownState { sp0 }),
            }
            report.step(
                mmio,
                generation,
                budget.used(),
                "waiting for the state to change",
                String::new(),
            );
            // Wait until the whole SP0 word changes, bounded per state and overall.
            let mut waited = 0u64;
            loop {
                let now = read_reg(mmio, generation, regs::SP0);
                if now != sp0 {
                    break;
                }
                if waited >= config.state_timeout_us {
                    return Err(Error::FirmwareStuck { sp0, waited_us: waited });
                }
                wait(delay, budget, 1000, "READY transition", mmio, generation)?;
                waited += 1000;
            }
        }
    }

    fn wait_doorbell_clear(mmio: &M, delay: &D, config: &Config, budget: &mut Budget) -> Result<(), Error> {
        if config.commits(Mistake::IgnoreDoorbellBusy) {
            return Ok(());
        }
        let mut waited = 0u64;
        while read_reg(mmio, config.generation, regs::DOORBELL) & regs::DB_IN_PROGRESS != 0 {
            if waited >= 10_000_000 {
                return Err(Error::DoorbellBusy { waited_us: waited });
            }
            wait(delay, budget, 1000, "doorbell", mmio, config.generation)?;
            waited += 1000;
        }
        Ok(())
    }

    /// Handshake doorbell write. Like Linux and FreeBSD it does not poll bit 0 first; bit
    /// 0 is polled after 0x07 and before IOC INIT.
    fn doorbell(mmio: &M, value: u32) {
        mmio.write32(regs::DOORBELL, value);
    }

    /// Diag reset (the 7-key HOST_DIAG sequence, as Linux and FreeBSD), ending in the READY
    /// transition.
    fn diag_reset(mmio: &M, delay: &D, config: &Config, budget: &mut Budget, report: &mut Report) -> Result<(), Error> {
        let g = config.generation;
        report.step(mmio, g, budget.used(), "diag reset: unlock", String::new());
        for k in regs::DIAG_UNLOCK_KEYS {
            mmio.write32(regs::WRITE_SEQUENCE, k);
        }
        let mut diag = 0;
        for _ in 0..100 {
            diag = read_reg(mmio, g, regs::HOST_DIAG);
            if diag & regs::DIAG_DRWE != 0 {
                break;
            }
            wait(delay, budget, 100_000, "diag reset: write enable", mmio, g)?;
        }
        if diag & regs::DIAG_DRWE == 0 {
            return Err(Error::ResetFailed {
                attempts: 1,
                sp0: read_reg(mmio, g, regs::SP0),
            });
        }
        mmio.write32(regs::HOST_DIAG, diag | regs::DIAG_RESET_ADAPTER);
        wait(delay, budget, 3_000_000, "diag reset", mmio, g)?;
        let mut cleared = false;
        for _ in 0..1000 {
            if read_reg(mmio, g, regs::HOST_DIAG) & regs::DIAG_RESET_ADAPTER == 0 {
                cleared = true;
                break;
            }
            wait(delay, budget, 100_000, "diag reset: adapter reset bit", mmio, g)?;
        }
        if !cleared {
            return Err(Error::ResetFailed {
                attempts: 1,
                sp0: read_reg(mmio, g, regs::SP0),
            });
        }
        for _ in 0..1000 {
            if FwStatus(read_reg(mmio, g, regs::SP0)).state().nibble() > FwState::FwInit.nibble() {
                break;
            }
            wait(delay, budget, 100_000, "diag reset: firmware start", mmio, g)?;
        }
        report.step(mmio, g, budget.used(), "diag reset: adapter reset done", String::new());
        Self::to_ready(mmio, delay, config, budget, report, false)
    }

    #[inline(always)]
    fn mistake(&self, m: Mistake) -> bool {
        self.config.commits(m)
    }

    /// Sets every reply slot to all-ones and every consumer index to 0.
    fn reset_reply_queues(&self) {
        let len = self.mem.replies.len();
        self.mem.replies.fill(0, len, 0xFF);
        if !self.mistake(Mistake::LastIdxNotZeroed) {
            for q in &self.queues {
                q.lock().last_idx = 0;
            }
        }
    }

    fn ioc_init(&self, budget: &mut Budget, report: &mut Report) -> Result<(), Error> {
        let g = self.generation;
        let l = &self.limits;
        let init = &self.mem.init;
        init.fill(0, init.len(), 0);
        let mfi = if self.mistake(Mistake::InitFrameMisaligned) {
            0x40
        } else {
            0
        };
        let req = INIT_REQUEST_OFF;
        // MPI2 IOC INIT request (72 bytes).
        init.write_u8(req, 0x04);
        init.write_u8(req + 0x03, 0x02);
        if self.mistake(Mistake::RdpqWithoutSupport) {
            init.write_u8(req + 0x07, 0x01);
        }
        init.write_u16(req + 0x0C, 0x0200);
        init.write_u16(req + 0x0E, 0x1000);
        init.write_u8(req + 0x16, 12);
        init.write_u8(req + 0x17, l.host_msix_vectors);
        init.write_u16(req + 0x1A, (FRAME_SIZE / 4) as u16);
        let depth = if self.mistake(Mistake::QueueDepthNotMultipleOf16) {
            l.reply_depth - 8
        } else {
            l.reply_depth
        };
        init.write_u16(req + 0x1C, depth as u16);
        let sense_high = if self.mistake(Mistake::SenseAbove4G) {
            1
        } else {
            (self.mem.sense.phys() >> 32) as u32
        };
        init.write_u32(req + 0x20, sense_high);
        init.write_u64(req + 0x28, self.mem.frames.phys());
        init.write_u64(req + 0x30, self.mem.replies.phys());
        // MFI INIT frame wrapping it.
        init.write_u8(mfi, 0x00);
        init.write_u8(
            mfi + 0x02,
            if self.mistake(Mistake::InitStatusNotPreset) {
                0
            } else {
                0xFF
            },
        );
        let mut caps = 0u32;
        if g != Generation::Thunderbolt {
            caps |= 1 << 1; // additional_msix: Invader and later always, as Linux and FreeBSD
        }
        if l.chain_bytes > 1024 {
            caps |= 1 << 8; // ext_io_size
        }
        init.write_u32(mfi + 0x04, caps);
        init.write_u16(mfi + 0x10, 0x0001);
        init.write_u32(mfi + 0x14, 72);
        init.write_u64(mfi + 0x18, init.phys() + req as u64);
        report.step(
            &self.mmio,
            g,
            budget.used(),
            "IOC INIT: posting",
            alloc::format!(
                "HostMSIxVectors {} depth {} capabilities {caps:#x} frame {:#x}",
                l.host_msix_vectors,
                depth,
                init.phys() + mfi as u64
            ),
        );
        self.mmio.write32(regs::INTR_MASK, regs::INTR_DISABLE_MASK);
        Self::wait_doorbell_clear(&self.mmio, &self.delay, &self.config, budget)?;
        fence(Ordering::Release);
        let addr = init.phys() + mfi as u64;
        let mfa = (addr & !0xFF) | u64::from(regs::DESC_MFA) | (addr & 0xFF);
        if self.mistake(Mistake::InitViaAtomicPort) {
            self.mmio.write32(regs::REQ_DESC_ATOMIC, mfa as u32);
        } else {
            self.mmio.write32(regs::REQ_DESC_LOW, mfa as u32);
            self.mmio.write32(regs::REQ_DESC_HIGH, (mfa >> 32) as u32);
        }
        let mut waited = 0u64;
        loop {
            let st = init.read_u8(mfi + 0x02);
            if st != 0xFF && !(self.mistake(Mistake::InitStatusNotPreset) && waited == 0) {
                if st != 0 {
                    let sp0 = read_reg(&self.mmio, g, regs::SP0);
                    return Err(Error::InitFailed { status: st, sp0 });
                }
                break;
            }
            if waited >= self.config.command_timeout_us {
                return Err(Error::InitTimeout {
                    sp0: read_reg(&self.mmio, g, regs::SP0),
                });
            }
            wait(&self.delay, budget, 100, "IOC INIT", &self.mmio, g)?;
            waited += 100;
            if waited.is_multiple_of(5_000_000) {
                let sp0 = read_reg(&self.mmio, g, regs::SP0);
                if FwStatus(sp0).state() == FwState::Fault {
                    return Err(Error::FirmwareFault { sp0 });
                }
            }
        }
        // cmd_status 0 is IOC INIT's success (Linux and FreeBSD check nothing else). SP0 may
        // still lag behind it: wait a while for OPERATIONAL and report what we saw, but only a
        // FAULT is an error; the watchdog handles a firmware that really never gets there.
        let mut sp0 = read_reg(&self.mmio, g, regs::SP0);
        let mut lag = 0u64;
        while FwStatus(sp0).state() != FwState::Operational && lag < OPERATIONAL_WAIT_US {
            if FwStatus(sp0).state() == FwState::Fault {
                return Err(Error::FirmwareFault { sp0 });
            }
            wait(
                &self.delay,
                budget,
                1000,
                "IOC INIT: waiting for OPERATIONAL",
                &self.mmio,
                g,
            )?;
            lag += 1000;
            sp0 = read_reg(&self.mmio, g, regs::SP0);
        }
        if FwStatus(sp0).state() != FwState::Operational {
            report.step(
                &self.mmio,
                g,
                budget.used(),
                "IOC INIT: done, SP0 not OPERATIONAL yet; going on as Linux does",
                alloc::format!("{} after {lag} us", Sp0(sp0)),
            );
        } else if lag > 0 {
            report.step(
                &self.mmio,
                g,
                budget.used(),
                "IOC INIT: SP0 reached OPERATIONAL after cmd_status",
                alloc::format!("{lag} us later"),
            );
        }
        let sp1 = read_reg(&self.mmio, g, regs::SP1);
        let atomic = (g == Generation::Aero && Sp1(sp1).bit24()) || self.mistake(Mistake::AtomicWithoutSupport);
        self.atomic_port.store(atomic, Ordering::Relaxed);
        report.step(
            &self.mmio,
            g,
            budget.used(),
            "IOC INIT: OPERATIONAL",
            alloc::format!("atomic descriptor port {}", if atomic { "in use" } else { "not used" }),
        );
        Ok(())
    }

    fn read_info(&mut self, budget: &mut Budget, report: &mut Report) -> Result<(), Error> {
        let mut mbox = [0u8; 12];
        mbox[0] = 1;
        let len = if self.mistake(Mistake::QemuDcmdSizes) {
            2048
        } else {
            CTRL_INFO_LEN
        };
        let b = self.dcmd_exclusive(budget, DCMD_CTRL_GET_INFO, mbox, len)?;
        self.info = ControllerInfo::parse(&b)?;
        let on_off = u32::from_le_bytes([b[0x620], b[0x621], b[0x622], b[0x623]]);
        self.ocr_disabled = on_off & (1 << 10) != 0;
        // max_lds @0x53F, adapterOperations3.supportMaxExtLDs @0x7E8 bit 5 (Linux, FreeBSD).
        let ops3 = u32::from_le_bytes([b[0x7E8], b[0x7E9], b[0x7EA], b[0x7EB]]);
        self.ext_lds = b[0x53F] > 64 || ops3 & (1 << 5) != 0;
        report.step(
            &self.mmio,
            self.generation,
            budget.used(),
            "CTRL_GET_INFO",
            alloc::format!(
                "{}; OCR {}",
                self.info,
                if self.ocr_disabled { "disabled" } else { "enabled" }
            ),
        );
        Ok(())
    }

    fn discover(&mut self, budget: &mut Budget, report: &mut Report) -> Result<(), Error> {
        // Linux's MR_LD_LIST (4104 B); mbox b[0] = 1 asks 256-VD firmware for all its LDs.
        let mut mbox = [0u8; 12];
        mbox[0] = u8::from(self.ext_lds);
        let b = self.dcmd_exclusive(budget, DCMD_LD_GET_LIST, mbox, LD_LIST_LEN)?;
        let max_lds = if self.ext_lds { 256 } else { dcmd::MAX_LD };
        let list: Vec<LdListEntry> = dcmd::parse_ld_list_up_to(&b, max_lds)?;
        report.step(
            &self.mmio,
            self.generation,
            budget.used(),
            "LD_GET_LIST",
            alloc::format!("{} logical drives: {list:?}", list.len()),
        );
        let mut drives = Vec::new();
        for e in list.iter().filter(|e| e.state != 0) {
            match self.read_capacity(budget, e.target, false)? {
                Ok(cap) => drives.push(LogicalDrive {
                    target: e.target,
                    blocks: cap.blocks,
                    block_size: cap.block_size,
                    state: e.state,
                    system_pd: false,
                }),
                // No guess from the LD list's size field, whose units no source gives:
                // the drive is left out and the report says why.
                Err(why) => report.step(
                    &self.mmio,
                    self.generation,
                    budget.used(),
                    "READ CAPACITY failed; drive left out",
                    alloc::format!("target {}: {why}", e.target),
                ),
            }
        }
        // System PDs (JBOD): PD_LIST_QUERY with mbox b[0] = 5 (exposed to host), as
        // Linux `megasas_get_pd_list`. Linux gives up on a failure; here it is reported and
        // bring-up goes on with the LDs.
        let mut mbox = [0u8; 12];
        mbox[0] = PD_QUERY_EXPOSED_TO_HOST;
        match self
            .dcmd_exclusive(budget, DCMD_PD_LIST_QUERY, mbox, dcmd::PD_LIST_LEN)
            .and_then(|b| dcmd::parse_pd_list(&b).map_err(Error::from))
        {
            Ok(pds) => {
                report.step(
                    &self.mmio,
                    self.generation,
                    budget.used(),
                    "PD_LIST_QUERY",
                    alloc::format!(
                        "{} system PD(s) (JBOD) of {} PDs present: {pds:?}",
                        pds.len(),
                        self.info.pds_present
                    ),
                );
                for pd in pds {
                    let Ok(target) = u8::try_from(pd.device_id) else {
                        report.step(
                            &self.mmio,
                            self.generation,
                            budget.used(),
                            "system PD left out",
                            alloc::format!("device id {:#x} is not below 256", pd.device_id),
                        );
                        continue;
                    };
                    if pd.scsi_type != 0 {
                        continue;
                    }
                    match self.read_capacity(budget, target, true)? {
                        Ok(cap) => drives.push(LogicalDrive {
                            target,
                            blocks: cap.blocks,
                            block_size: cap.block_size,
                            state: 0,
                            system_pd: true,
                        }),
                        Err(why) => report.step(
                            &self.mmio,
                            self.generation,
                            budget.used(),
                            "READ CAPACITY failed; system PD left out",
                            alloc::format!("device {target}: {why}"),
                        ),
                    }
                }
            }
            Err(e) => report.step(
                &self.mmio,
                self.generation,
                budget.used(),
                "PD_LIST_QUERY failed; no JBOD disks",
                alloc::format!("{e}"),
            ),
        }
        report.step(
            &self.mmio,
            self.generation,
            budget.used(),
            "drives",
            alloc::format!("{drives:?}"),
        );
        self.drives = drives;
        Ok(())
    }

    /// READ CAPACITY(16), then READ CAPACITY(10) if that fails, through the LD non-read/write
    /// path into DCMD slot 0's data buffer. The outer error stops bring-up (firmware gone); the
    /// inner one says why this drive has no usable capacity.
    fn read_capacity(
        &self,
        budget: &mut Budget,
        target: u8,
        system_pd: bool,
    ) -> Result<Result<Capacity, String>, Error> {
        let buf_off = MFI_FRAME_LEN * usize::from(DCMD_SMIDS);
        let cap_buf = self.mem.dcmd.phys() + buf_off as u64;
        let mut failures = String::new();
        for sixteen in [true, false] {
            let mut cdb = [0u8; 16];
            let len = if sixteen {
                cdb[0] = 0x9E;
                cdb[1] = 0x10;
                cdb[10..14].copy_from_slice(&READ_CAPACITY16_LEN.to_be_bytes());
                READ_CAPACITY16_LEN
            } else {
                cdb[0] = 0x25;
                8
            };
            self.mem.dcmd.fill(buf_off, READ_CAPACITY16_LEN as usize, 0);
            let seg = [Segment { phys: cap_buf, len }];
            let c = self.polled_io(budget, target, system_pd, &cdb, false, &seg)?;
            let name = if sixteen {
                "READ CAPACITY(16)"
            } else {
                "READ CAPACITY(10)"
            };
            let mut raw = [0u8; READ_CAPACITY16_LEN as usize];
            self.mem.dcmd.read_bytes(buf_off, &mut raw);
            // A residual (0x2D + GOOD) is fine as long as the fields we read arrived.
            let need = if sixteen { 12 } else { 8 };
            let parsed = match c.outcome {
                IoOutcome::Ok if c.bytes_done >= need => {
                    if sixteen {
                        Capacity::parse(&raw).map_err(|e| alloc::format!("{e}"))
                    } else {
                        capacity_from_rc10(&raw)
                    }
                }
                IoOutcome::Ok => Err(alloc::format!("only {} bytes returned", c.bytes_done)),
                IoOutcome::Failed(err) => Err(alloc::format!("{err}")),
                IoOutcome::Reset => return Err(Error::Resetting),
            };
            match parsed {
                Ok(cap) => return Ok(Ok(cap)),
                Err(why) => {
                    if !failures.is_empty() {
                        failures.push_str("; ");
                    }
                    failures.push_str(name);
                    failures.push_str(": ");
                    failures.push_str(&why);
                }
            }
        }
        Ok(Err(failures))
    }

    /// Submits with tag 0 on queue 0 and polls queue 0 until it completes (bring-up only).
    fn polled_io(
        &self,
        budget: &mut Budget,
        target: u8,
        system_pd: bool,
        cdb: &[u8; 16],
        write: bool,
        segs: &[Segment],
    ) -> Result<Completion, Error> {
        let len: u32 = segs.iter().map(|s| s.len).sum();
        self.submit_raw(0, 0, target, system_pd, cdb, Some(write), len, segs, 0, true)?;
        let mut waited = 0u64;
        loop {
            let mut done = None;
            self.reap_inner(0, &mut |c| done = Some(c));
            if let Some(c) = done {
                return Ok(c);
            }
            if waited >= self.config.command_timeout_us {
                return Err(Error::DcmdTimeout {
                    opcode: u32::from(cdb[0]),
                });
            }
            if waited.is_multiple_of(10_000) {
                let sp0 = read_reg(&self.mmio, self.generation, regs::SP0);
                if FwStatus(sp0).state() == FwState::Fault {
                    return Err(Error::FirmwareFault { sp0 });
                }
            }
            wait(&self.delay, budget, 100, "polled I/O", &self.mmio, self.generation)?;
            waited += 100;
        }
    }

    /// A polled DCMD while nothing else runs (bring-up, reset): polls queue 0 for the late
    /// reply too, so the SMID is free again on return.
    fn dcmd_exclusive(&self, budget: &mut Budget, opcode: u32, mbox: [u8; 12], len: usize) -> Result<Vec<u8>, Error> {
        self.dcmd_inner(Some(budget), opcode, mbox, len)
    }

    /// Runs a DCMD while I/O may be running (e.g. cache flush before shutdown). Its SMID is
    /// freed when queue 0's reaper sees its reply.
    pub fn dcmd(&self, opcode: u32, mbox: [u8; 12], len: usize) -> Result<Vec<u8>, Error> {
        let _g = self.gate.try_enter(0).ok_or(Error::Resetting)?;
        self.dcmd_inner(None, opcode, mbox, len)
    }

    fn dcmd_inner(
        &self,
        mut budget: Option<&mut Budget>,
        opcode: u32,
        mbox: [u8; 12],
        len: usize,
    ) -> Result<Vec<u8>, Error> {
        if len > DCMD_DATA_LEN {
            return Err(Error::BadConfig {
                what: "DCMD length",
                expected: "at most 8192 bytes",
            });
        }
        let _l = self.dcmd_lock.lock();
        let exclusive = budget.is_some();
        let k = if self.mistake(Mistake::LeakDcmdSmid) {
            0
        } else {
            (0..usize::from(DCMD_SMIDS))
                .find(|&k| !self.dcmd_reply_pending[k].load(Ordering::Acquire))
                .ok_or(Error::NoDcmdSlot)?
        };
        let smid = self.limits.io_tags + 1 + k as u16;
        let mfi_off = k * MFI_FRAME_LEN;
        let data_off = usize::from(DCMD_SMIDS) * MFI_FRAME_LEN + k * DCMD_DATA_LEN;
        let d = &self.mem.dcmd;
        d.fill(mfi_off, MFI_FRAME_LEN, 0);
        d.fill(data_off, DCMD_DATA_LEN, 0);
        d.write_u8(mfi_off, 0x05);
        d.write_u8(mfi_off + 0x02, 0xFF);
        d.write_u32(mfi_off + 0x14, len as u32);
        d.write_u32(mfi_off + 0x18, opcode);
        d.write_bytes(mfi_off + 0x1C, &mbox);
        if len > 0 {
            d.write_u8(mfi_off + 0x07, 1);
            let data = d.phys() + data_off as u64;
            if self.generation.g35_raid_context() {
                // Ventura/Aero: sge64 and SGL64 (Linux with a 64-bit DMA mask).
                d.write_u16(mfi_off + 0x10, MFI_DIR_READ | MFI_SGL64);
                d.write_u64(mfi_off + 0x28, data);
                d.write_u32(mfi_off + 0x30, len as u32);
            } else {
                // Thunderbolt/Invader: sge32 as Linux and FreeBSD (all DCMD memory is below
                // 4 GiB).
                d.write_u16(mfi_off + 0x10, MFI_DIR_READ);
                d.write_u32(mfi_off + 0x28, data as u32);
                d.write_u32(mfi_off + 0x2C, len as u32);
            }
        }
        // No data (cache flush, shutdown): sge_count 0 and DIR_NONE, as Linux and FreeBSD;
        // the flags word stays 0.
        if len == 0 && self.mistake(Mistake::NoDataDcmdWithSge) {
            d.write_u8(mfi_off + 0x07, 1);
            d.write_u16(mfi_off + 0x10, MFI_DIR_READ | MFI_SGL64);
            d.write_u64(mfi_off + 0x28, d.phys() + data_off as u64);
        }
        // The pass-through I/O frame: a chain element pointing at the MFI frame.
        let f = &self.mem.frames;
        let fo = FRAME_SIZE * usize::from(smid);
        f.fill(fo, FRAME_SIZE, 0);
        f.write_u8(fo + F_CHAIN_OFFSET, 8);
        f.write_u8(fo + F_FUNCTION, FUNC_MFI_PASSTHRU);
        f.write_u8(fo + F_SGL_OFFSET0, 0x20);
        f.write_bytes(
            fo + F_SGL,
            &sge_bytes(d.phys() + mfi_off as u64, MFI_FRAME_LEN as u32, 0x83),
        );
        self.dcmd_reply_pending[k].store(true, Ordering::Release);
        let msix = if self.mistake(Mistake::DcmdOffQueue0) && self.limits.queues > 1 {
            1
        } else {
            0
        };
        fence(Ordering::Release);
        self.post_descriptor(desc(regs::DESC_SCSI_IO, msix, smid));
        let mut waited = 0u64;
        let mut status = 0xFF;
        loop {
            if status == 0xFF {
                status = d.read_u8(mfi_off + 0x02);
            }
            let reply_done = !self.dcmd_reply_pending[k].load(Ordering::Acquire);
            if status != 0xFF && (!exclusive || reply_done || self.mistake(Mistake::LeakDcmdSmid)) {
                break;
            }
            if waited >= self.config.command_timeout_us {
                return Err(Error::DcmdTimeout { opcode });
            }
            if exclusive {
                self.reap_inner(0, &mut |_| {});
            }
            // A firmware that faults never answers: stop waiting (the SMID stays reserved).
            if waited.is_multiple_of(10_000) {
                let sp0 = read_reg(&self.mmio, self.generation, regs::SP0);
                if FwStatus(sp0).state() == FwState::Fault {
                    return Err(Error::FirmwareFault { sp0 });
                }
            }
            match budget.as_deref_mut() {
                Some(b) => wait(&self.delay, b, 100, "DCMD", &self.mmio, self.generation)?,
                None => self.delay.delay_us(100),
            }
            waited += 100;
        }
        if self.mistake(Mistake::LeakDcmdSmid) {
            self.dcmd_reply_pending[k].store(false, Ordering::Release);
        }
        if status != 0 {
            return Err(Error::DcmdFailed {
                opcode,
                status: MfiStatus(status),
            });
        }
        let mut out = vec![0u8; len];
        d.read_bytes(data_off, &mut out);
        Ok(out)
    }

    // ----- accessors -----

    /// Generation.
    pub fn generation(&self) -> Generation {
        self.generation
    }
    /// Limits in use.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }
    /// Controller information from CTRL_GET_INFO.
    pub fn info(&self) -> &ControllerInfo {
        &self.info
    }
    /// Logical drives found at bring-up.
    pub fn drives(&self) -> &[LogicalDrive] {
        &self.drives
    }
    /// Number of reply queues (= vectors used; 1 without MSI-X).
    pub fn queues(&self) -> u16 {
        self.limits.queues
    }
    /// CPU the vector of reply queue `q` is aimed at (CPU 0 without MSI-X).
    pub fn queue_cpu(&self, q: u16) -> usize {
        self.config.vector_cpus.get(usize::from(q)).copied().unwrap_or(0)
    }
    /// Whether descriptors go through the atomic port (Aero with SP1 bit 24).
    pub fn uses_atomic_port(&self) -> bool {
        self.atomic_port.load(Ordering::Relaxed)
    }
    /// Whether SYNCHRONIZE CACHE goes to the firmware (SP1 bit 24); otherwise a flush completes
    /// at once with success, as Linux and FreeBSD do.
    pub fn flush_goes_to_firmware(&self) -> bool {
        self.limits.fw_sync_cache
    }
    /// Whether the controller was given up.
    pub fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Acquire)
    }
    /// Whether I/O tag `tag` is on the controller.
    pub fn tag_in_flight(&self, tag: u32) -> bool {
        self.smids
            .get(tag as usize + 1)
            .is_some_and(|s| s.slot.in_flight().is_some())
    }

    /// Unmasks interrupts (after the kernel installed the handlers).
    pub fn enable_interrupts(&self) {
        self.interrupts_enabled.store(true, Ordering::Release);
        self.mmio.write32(regs::INTR_STATUS, 0xFFFF_FFFF);
        let _ = self.mmio.read32(regs::INTR_STATUS);
        self.mmio.write32(regs::INTR_MASK, regs::INTR_ENABLE_MASK);
        let _ = self.mmio.read32(regs::INTR_MASK);
    }

    /// Masks every interrupt source.
    pub fn disable_interrupts(&self) {
        self.interrupts_enabled.store(false, Ordering::Release);
        self.mmio.write32(regs::INTR_MASK, regs::INTR_DISABLE_MASK);
    }

    // ----- I/O -----

    /// Submits an LD request with I/O tag `tag` (SMID `tag + 1`) whose completion goes to
    /// reply queue `queue`. `cookie` comes back in the [`Completion`]. Returns the driver
    /// generation of this use of the tag. A flush when the firmware does not handle
    /// SYNCHRONIZE CACHE must not be submitted (see [`Controller::flush_goes_to_firmware`]).
    pub fn submit(&self, tag: u32, queue: u16, req: &IoRequest<'_>, cookie: u64) -> Result<u32, Error> {
        let entered = self.enter(queue).ok_or(Error::Resetting)?;
        let checked = self.validate(req)?;
        self.submit_validated(&entered, tag, queue, req, &checked, cookie)
    }

    /// [`Controller::submit`] for a request `validate` already accepted, inside a submission
    /// section the caller entered (blk's `queue_rq` validates before `Rq::issue` and posts
    /// after it): the request is neither checked nor the gate taken a second time.
    /// `req` must be the request `checked` came from.
    pub fn submit_validated(
        &self,
        _entered: &Entered<'_>,
        tag: u32,
        queue: u16,
        req: &IoRequest<'_>,
        checked: &Validated,
        cookie: u64,
    ) -> Result<u32, Error> {
        if self.is_dead() {
            return Err(Error::Dead);
        }
        self.submit_raw(
            tag,
            queue,
            req.target,
            req.system_pd,
            &checked.cdb,
            checked.write,
            checked.len,
            req.sgl,
            cookie,
            false,
        )
    }

    /// Enters the submission section: while the guard lives no reset can start, so a caller
    /// can hand a request to its owner's bookkeeping (blk's `Rq::issue`) and then post it
    /// without a reset in between. None while a reset runs.
    pub fn enter(&self, queue: u16) -> Option<Entered<'_>> {
        self.gate
            .try_enter(usize::from(queue))
            .map(|inside| Entered { _inside: inside })
    }

    /// Checks a request without posting it: drive, range, segments. Returns what
    /// [`Controller::submit_validated`] needs: the CDB, the direction and the byte count.
    pub fn validate(&self, req: &IoRequest<'_>) -> Result<Validated, Error> {
        let drive = self
            .drives
            .iter()
            .find(|d| d.target == req.target && d.system_pd == req.system_pd)
            .ok_or(Error::NoSuchDrive { target: req.target })?;
        let (cdb, write, len) = match req.op {
            IoOp::Read | IoOp::Write => {
                let end = req.lba.checked_add(u64::from(req.blocks));
                if req.blocks == 0 || end.is_none_or(|e| e > drive.blocks) {
                    return Err(Error::BeyondEnd {
                        lba: req.lba,
                        blocks: req.blocks,
                        capacity: drive.blocks,
                    });
                }
                let len = u64::from(req.blocks) * u64::from(drive.block_size);
                let len = u32::try_from(len).map_err(|_| Error::TooManySegments {
                    count: req.sgl.len(),
                    max: usize::from(self.limits.max_sge),
                })?;
                let write = req.op == IoOp::Write;
                (
                    cdb16(if write { 0x8A } else { 0x88 }, req.lba, req.blocks),
                    Some(write),
                    len,
                )
            }
            IoOp::Flush => {
                // SYNCHRONIZE CACHE(10), LBA 0 and 0 blocks (the whole LD): the only form Linux
                // and FreeBSD send to (and intercept for) MegaRAID LDs.
                let mut c = [0u8; 16];
                c[0] = 0x35;
                (c, None, 0)
            }
        };
        if !self.mistake(Mistake::IgnoreMaxSge) && req.sgl.len() > usize::from(self.limits.max_sge) {
            return Err(Error::TooManySegments {
                count: req.sgl.len(),
                max: usize::from(self.limits.max_sge),
            });
        }
        let sum = match req.sgl {
            // The common case (one page, one buffer) without the loops below.
            [one] if one.len != 0 => u64::from(one.len),
            sgl => {
                if let Some(index) = sgl.iter().position(|s| s.len == 0)
                    && !self.mistake(Mistake::ZeroLengthSge)
                {
                    return Err(Error::ZeroLengthSegment { index });
                }
                sgl.iter().map(|s| u64::from(s.len)).sum()
            }
        };
        if sum != u64::from(len) {
            return Err(Error::SglLengthMismatch {
                sgl: sum,
                expected: u64::from(len),
            });
        }
        Ok(Validated { cdb, write, len })
    }

    // Inlined into `submit_validated`: no ten arguments through the stack per I/O.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn submit_raw(
        &self,
        tag: u32,
        queue: u16,
        target: u8,
        system_pd: bool,
        cdb: &[u8; 16],
        rw: Option<bool>,
        len: u32,
        segs: &[Segment],
        cookie: u64,
        non_rw: bool,
    ) -> Result<u32, Error> {
        let tags = u32::from(self.limits.io_tags);
        if tag >= tags {
            return Err(Error::TagOutOfRange { tag, tags });
        }
        if queue >= self.limits.queues {
            return Err(Error::QueueOutOfRange {
                queue,
                queues: self.limits.queues,
            });
        }
        let mut smid = tag as u16 + 1;
        let state = &self.smids[usize::from(smid)];
        let slot = &state.slot;
        // Claim the tag before the frame is posted, so a reply can only match a posted frame.
        let generation = if self.mistake(Mistake::RepostOutstanding) {
            slot.force_claim()
        } else {
            slot.claim().ok_or(Error::TagBusy { tag })?
        };
        // Cookie and target are read by the reaper after it sees the reply; the Release fence
        // before the descriptor write orders these stores before the device can see the command.
        state.cookie.store(cookie, Ordering::Relaxed);
        let must_move = if !non_rw && matches!(cdb[0], 0x88 | 0x8A) {
            len
        } else {
            0
        };
        state.required.store(must_move, Ordering::Relaxed);
        state.target.store(target, Ordering::Relaxed);

        // The whole frame is composed here and written in one run of 8-byte stores, not
        // zeroed byte by byte with each field then stored through its own bounds check (about 750
        // instructions per I/O). Every byte is written, so nothing of the SMID's
        // previous use (status, DataLength, SGEs) survives, as with Linux's memset at free.
        let fo = FRAME_SIZE * usize::from(smid);
        let mut img = FrameImage::new();
        // A system PD without a RAID map (Linux `megasas_build_syspd_fusion`): DevHandle
        // 0xFFFF, the device id in the RAID context, FastPath SCSI IO (Function 0, FP_IO).
        img.set_u16(F_DEV_HANDLE, if system_pd { 0xFFFF } else { u16::from(target) });
        img.set_u8(
            F_FUNCTION,
            if self.mistake(Mistake::GarbageFunction) {
                0x5A
            } else if system_pd {
                FUNC_SCSI_IO
            } else {
                FUNC_LD_IO
            },
        );
        let sense = self.mem.sense.phys() + (SENSE_SIZE * (usize::from(smid) - 1)) as u64;
        let sense_low = if self.mistake(Mistake::SenseOutsidePool) {
            0x10
        } else {
            sense as u32
        };
        img.set_u32(F_SENSE_LOW, sense_low);
        img.set_u16(F_SGL_FLAGS, 0x0002);
        img.set_u8(
            F_SENSE_LEN,
            if self.mistake(Mistake::SenseLengthZero) {
                0
            } else {
                SENSE_SIZE as u8
            },
        );
        img.set_u8(F_SGL_OFFSET0, 0x20);
        let is_rw = !non_rw && !system_pd && rw.is_some() && cdb[0] != 0x9E;
        let data_len = if self.mistake(Mistake::DataLengthWrong) && is_rw {
            len + 512
        } else {
            len
        };
        img.set_u32(F_DATA_LEN, data_len);
        let mut io_flags = u16::from(cdb_len(cdb[0]));
        if system_pd
            && self.generation != Generation::Thunderbolt
            && !self.mistake(Mistake::SystemPdWithoutFastPathFlag)
        {
            io_flags |= IO_FLAGS_FAST_PATH;
        }
        img.set_u16(F_IO_FLAGS, io_flags);
        let mut control = match rw {
            Some(true) => CONTROL_WRITE,
            Some(false) => CONTROL_READ,
            None => 0,
        };
        if self.mistake(Mistake::WrongDirection) && rw == Some(true) {
            control = CONTROL_READ;
        }
        img.set_u32(F_CONTROL, control);
        img.set_cdb(cdb);
        let nsge = self.write_sgl(&mut img, fo, smid, state, segs);
        self.write_raid_context(&mut img, target, nsge, is_rw);
        if system_pd {
            img.set_u8(F_RAID_CTX + 0x18, RAID_FLAGS_SYSTEM_PD);
        }
        let mut flags = if system_pd {
            regs::DESC_FP_IO
        } else if is_rw {
            self.generation.ld_rw_descriptor()
        } else {
            regs::DESC_SCSI_IO
        };
        if self.mistake(Mistake::DescriptorMismatch) {
            flags = regs::DESC_HIGH_PRIORITY;
        }
        if self.mistake(Mistake::FastPathWithoutMap) {
            flags = regs::DESC_FP_IO;
            img.set_u8(F_FUNCTION, 0x00);
        }
        let mut msix = queue as u8;
        if self.mistake(Mistake::MsixIndexOutOfRange) {
            msix = self.limits.queues as u8;
        }
        if self.mistake(Mistake::SmidZero) {
            smid = 0;
        }
        if self.mistake(Mistake::SmidBeyondPool) {
            smid = self.limits.max_fw_cmds + 1;
        }
        self.mem.frames.write_u32s(fo, &img.0);
        // The frame must be visible to the device before the descriptor that names it.
        fence(Ordering::Release);
        self.post_descriptor(desc(flags, msix, smid));
        if self.mistake(Mistake::RepostOutstanding) {
            self.post_descriptor(desc(flags, msix, smid));
        }
        Ok(generation)
    }

    /// Writes the SGL into the frame at `fo` (its 8 slots zeroed first, so no SGE of the
    /// SMID's previous use survives) and the chain frame; sets the image's ChainOffset.
    /// Writes the SGL into the frame at `fo` and the chain frame, and the image's ChainOffset.
    /// Slots that the SMID's previous use wrote and this one does not are zeroed, so no SGE of
    /// an earlier request survives (Linux zeroes the whole frame at free); a run of
    /// single-segment requests zeroes nothing.
    #[inline(always)]
    fn write_sgl(&self, img: &mut FrameImage, fo: usize, smid: u16, state: &SmidState, segs: &[Segment]) -> usize {
        let f = &self.mem.frames;
        let set_sge = |slot: usize, addr: u64, len: u32, flags: u8| {
            f.write_u32s(fo + F_SGL + SGE_SIZE * slot, &sge_words(addr, len, flags));
        };
        let g = self.generation;
        let eol = g.end_of_list_flag();
        let n = segs.len();
        let flag_for = |i: usize| -> u8 {
            let mut fl = 0;
            if eol && i + 1 == n && !self.mistake(Mistake::MissingEndOfList) {
                fl |= SGE_END_OF_LIST;
            }
            if eol && i == 0 && n > 1 && self.mistake(Mistake::EarlyEndOfList) {
                fl |= SGE_END_OF_LIST;
            }
            fl
        };
        let addr_for = |i: usize, s: &Segment| -> u64 {
            if i == 0 && self.mistake(Mistake::AllOnesAddress) {
                u64::MAX
            } else {
                s.phys
            }
        };
        let len_for = |i: usize, s: &Segment| -> u32 {
            if i == 0 && self.mistake(Mistake::SglSumWrong) {
                s.len - 1
            } else {
                s.len
            }
        };
        let mut chain_offset = 0u8;
        // SGL slots this request writes.
        let mut used = n;
        if n <= 8 {
            for (i, s) in segs.iter().enumerate() {
                set_sge(i, addr_for(i, s), len_for(i, s), flag_for(i));
            }
            if self.mistake(Mistake::ChainOffsetWithoutChain) {
                chain_offset = 0x0F;
            }
        } else {
            let main = if self.mistake(Mistake::ChainNotInSlot7) { 6 } else { 7 };
            for (i, s) in segs.iter().take(main).enumerate() {
                set_sge(i, addr_for(i, s), len_for(i, s), flag_for(i));
            }
            let chain_off = self.mem.chain_stride * (usize::from(smid) - 1);
            let chain_phys = self.mem.chains.phys() + chain_off as u64;
            let rest = n - main;
            let chain_len = if self.mistake(Mistake::ChainLengthWrong) {
                16 * rest as u32 + 16
            } else {
                16 * rest as u32
            };
            set_sge(main, chain_phys, chain_len, g.chain_flags());
            for (j, s) in segs.iter().enumerate().skip(main) {
                let mut fl = flag_for(j);
                if j == main && self.mistake(Mistake::NestedChain) {
                    fl |= SGE_CHAIN;
                }
                self.mem.chains.write_bytes(
                    chain_off + 16 * (j - main),
                    &sge_bytes(addr_for(j, s), len_for(j, s), fl),
                );
            }
            chain_offset = 0x0F;
            used = main + 1;
        }
        let previously = usize::from(state.sgl_slots.load(Ordering::Relaxed));
        for slot in used..previously {
            f.write_u32s(fo + F_SGL + SGE_SIZE * slot, &[0; SGE_SIZE / 4]);
        }
        state.sgl_slots.store(used as u8, Ordering::Relaxed);
        if self.mistake(Mistake::BadChainOffset) {
            chain_offset = 0x10;
        }
        img.set_u8(F_CHAIN_OFFSET, chain_offset);
        n
    }

    fn write_raid_context(&self, img: &mut FrameImage, target: u8, nsge: usize, is_rw: bool) {
        let is_rw = is_rw || self.mistake(Mistake::RwContextOnNonRw);
        let c = F_RAID_CTX;
        let nsge = if self.mistake(Mistake::NumSgeWrong) {
            nsge + 1
        } else {
            nsge
        } as u16;
        // Type/nseg and the sequence number belong to LD read/write only; Linux and FreeBSD
        // leave them zero for every other LD command.
        if self.generation.g35_raid_context() {
            if is_rw {
                img.set_u16(c, 0x0012);
                img.set_u16(c + 0x04, 1 << 4); // SQN
            }
            img.set_u16(c + 0x06, u16::from(target));
            img.set_u16(c + 0x1C, nsge & 0x0FFF);
        } else {
            if self.generation == Generation::Invader && is_rw {
                img.set_u8(c, 0x12);
                img.set_u8(c + 0x04, 0x08); // region type 0 | SEQ_NUM_ENABLE
            }
            img.set_u16(c + 0x06, u16::from(target));
            img.set_u8(c + 0x19, nsge as u8);
            img.set_u8(c + 0x1E, (nsge >> 8) as u8);
        }
        if !is_rw {
            // Linux gives the block-layer timeout (90 s by default).
            img.set_u16(c + 0x02, 90);
        }
    }

    fn post_descriptor(&self, d: u64) {
        // The two-register mistakes (tests of the model's latch checks).
        if self.mistake(Mistake::HighWithoutLow) {
            self.mmio.write32(regs::REQ_DESC_HIGH, (d >> 32) as u32);
            return;
        }
        if self.mistake(Mistake::LowTwice) {
            self.mmio.write32(regs::REQ_DESC_LOW, d as u32);
            self.mmio.write32(regs::REQ_DESC_LOW, d as u32);
            self.mmio.write32(regs::REQ_DESC_HIGH, (d >> 32) as u32);
            return;
        }
        if self.atomic_port.load(Ordering::Relaxed) {
            // One 32-bit store carries flags, MSIxIndex and SMID.
            self.mmio.write32(regs::REQ_DESC_ATOMIC, d as u32);
        } else {
            // One 8-byte write (Linux's `writeq`): nothing for another CPU's post to split, so
            // no lock (the two-dword form needs one: FreeBSD's and 32-bit Linux's `hba_lock`).
            self.mmio.write64(regs::REQ_DESC_LOW, d);
        }
    }

    /// Walks reply queue `queue` (the handler of MSI-X vector `queue`), calling `sink` for each
    /// finished I/O. Returns the number of replies consumed. Returns 0 without touching
    /// anything while a reset runs.
    ///
    /// Generic over the sink, so the block binding's completion handler is inlined into the
    /// walk (no `dyn` call and no `Completion` built in memory per reply).
    pub fn reap<F: FnMut(Completion) + ?Sized>(&self, queue: u16, sink: &mut F) -> usize {
        let Some(_g) = self.gate.try_enter(usize::from(queue)) else {
            return 0;
        };
        if usize::from(queue) >= self.queues.len() {
            return 0;
        }
        self.reap_inner(queue, sink)
    }

    fn reap_inner<F: FnMut(Completion) + ?Sized>(&self, queue: u16, sink: &mut F) -> usize {
        let depth = self.limits.reply_depth;
        let mut q = self.queues[usize::from(queue)].lock();
        let base = usize::from(queue) * depth as usize * 8;
        let batch = (u32::from(self.limits.max_fw_cmds) / 4).max(1);
        let mut consumed = 0u32;
        let mut unreported = 0u32;
        // Bounded: at most one lap per call, so a device that keeps posting cannot hold us.
        while consumed < depth {
            let off = base + q.last_idx as usize * 8;
            let d = self.mem.replies.read_u64_atomic(off);
            if d & 0x0F == 0x0F || d as u32 == u32::MAX || (d >> 32) as u32 == u32::MAX {
                break;
            }
            // Pairs with the device's write of the frame status before the reply descriptor.
            fence(Ordering::Acquire);
            let smid = ((d >> 16) & 0xFFFF) as u16;
            if !self.mistake(Mistake::SlotsNotRestored) {
                self.mem.replies.write_u64_atomic(off, UNUSED_REPLY);
            }
            // Wraps at depth without a division.
            q.last_idx = if q.last_idx + 1 == depth { 0 } else { q.last_idx + 1 };
            if self.mistake(Mistake::HostIndexNoWrap) && q.last_idx == 0 {
                q.wrapped = true;
            }
            consumed += 1;
            unreported += 1;
            self.dispatch(smid, sink);
            if unreported >= batch {
                self.write_host_index(queue, q.last_idx, q.wrapped);
                unreported = 0;
            }
        }
        if consumed == depth {
            self.stats.walk_bound_hits.fetch_add(1, Ordering::Relaxed);
        }
        if unreported > 0 {
            self.write_host_index(queue, q.last_idx, q.wrapped);
        }
        consumed as usize
    }

    fn write_host_index(&self, queue: u16, idx: u32, wrapped: bool) {
        if self.mistake(Mistake::NoHostIndexWrite) {
            return;
        }
        // The all-ones stores must reach memory before the device may reuse the slots.
        fence(Ordering::Release);
        let mut idx = idx;
        if self.mistake(Mistake::HostIndexNoWrap) && wrapped {
            idx += self.limits.reply_depth;
        }
        if self.mistake(Mistake::HostIndexAhead) {
            idx = (idx + 1) % self.limits.reply_depth;
        }
        let q = if self.mistake(Mistake::HostIndexWrongQueue) {
            queue + 1
        } else {
            queue
        };
        if self.limits.combined && !self.mistake(Mistake::HostIndexWrongRegister) {
            let reg = regs::SUPPLEMENTARY_HOST_INDEX + 0x10 * u32::from(q >> 3);
            self.mmio.write32(reg, (u32::from(q & 7) << 24) | idx);
        } else {
            self.mmio.write32(regs::REPLY_HOST_INDEX, (u32::from(q) << 24) | idx);
        }
    }

    #[inline(always)]
    fn dispatch<F: FnMut(Completion) + ?Sized>(&self, smid: u16, sink: &mut F) {
        let io_tags = self.limits.io_tags;
        if smid == 0 || smid > self.limits.max_fw_cmds {
            self.bogus(smid, "out of range");
            return;
        }
        if smid > io_tags {
            let k = usize::from(smid - io_tags - 1);
            if !self.dcmd_reply_pending[k].swap(false, Ordering::AcqRel) {
                self.bogus(smid, "DCMD SMID not in flight");
            }
            return;
        }
        let state = &self.smids[usize::from(smid)];
        let slot = &state.slot;
        let Some(word) = slot.in_flight() else {
            self.bogus(smid, "not in flight");
            return;
        };
        let f = &self.mem.frames;
        let fo = FRAME_SIZE * usize::from(smid);
        // ex_status (0x76) and status (0x77) share the RAID context's aligned word at 0x74: one
        // load for both.
        let status_word = f.read_u32(fo + F_EX_STATUS - 2);
        let ex_status = (status_word >> 16) as u8;
        let status = (status_word >> 24) as u8;
        let bytes_done = f.read_u32(fo + F_DATA_LEN);
        // 0x2D with SCSI status GOOD is a completion with a residual: DataLength says how much
        // moved (Linux `map_cmd_status`). A read or write that moved less than asked
        // is not a success here (Linux's midlayer would retry the rest; blk has no partial
        // completion), so it fails rather than hand back a half-filled buffer.
        let residual_ok = status == 0x2D && ex_status == 0 && bytes_done >= state.required.load(Ordering::Relaxed);
        let outcome = if status == 0 || residual_ok {
            IoOutcome::Ok
        } else if status == 0x2D && ex_status == 0 {
            IoOutcome::Failed(IoError {
                kind: IoErrorKind::Other,
                mfi_status: MfiStatus(status),
                scsi_status: ex_status,
                sense: None,
            })
        } else {
            let mut sense = [0u8; SENSE_SIZE];
            self.mem
                .sense
                .read_bytes(SENSE_SIZE * (usize::from(smid) - 1), &mut sense);
            match IoError::classify(MfiStatus(status), ex_status, &sense) {
                Some(e) => IoOutcome::Failed(e),
                None => IoOutcome::Ok,
            }
        };
        let c = Completion {
            tag: u32::from(smid - 1),
            generation: SmidSlot::generation(word),
            cookie: state.cookie.load(Ordering::Relaxed),
            target: state.target.load(Ordering::Relaxed),
            outcome,
            bytes_done,
        };
        // Release the tag before handing the completion on, so the sink may reuse it at once.
        if !slot.finish(word) {
            self.bogus(smid, "raced");
            return;
        }
        sink(c);
    }

    fn bogus(&self, smid: u16, why: &str) {
        let n = self.stats.bogus_replies.fetch_add(1, Ordering::Relaxed);
        // Rate-limited: the first few and then every 1024th.
        if n < 8 || n.is_multiple_of(1024) {
            log::warn!(
                "megasas-fusion: dropped reply for SMID {smid} ({why}); {} so far",
                n + 1
            );
        }
    }

    /// INTx handler: reads the interrupt status (with the Aero zero-read retry).
    pub fn handle_intx(&self, sink: &mut dyn FnMut(Completion)) -> IntxResult {
        let st = read_reg(&self.mmio, self.generation, regs::INTR_STATUS);
        if st & (regs::INTR_DOORBELL | regs::INTR_REPLY) == 0 {
            return IntxResult::NotOurs;
        }
        if st & regs::INTR_DOORBELL != 0 {
            self.mmio.write32(regs::INTR_STATUS, st);
            let sp0 = read_reg(&self.mmio, self.generation, regs::SP0);
            if FwStatus(sp0).state() == FwState::Fault {
                return IntxResult::Fault(sp0);
            }
        }
        IntxResult::Handled(self.reap(0, sink))
    }

    /// Watchdog check of SP0 (call about once a second and on timeouts).
    pub fn health(&self) -> Health {
        if self.is_dead() {
            return Health::Dead;
        }
        let sp0 = read_reg(&self.mmio, self.generation, regs::SP0);
        // Only FAULT warrants a reset (Linux `megasas_fault_detect_work`, FreeBSD's OCR thread);
        // any other value may be a transient read and is left to the next tick.
        match FwStatus(sp0).state() {
            FwState::Fault => Health::NeedsReset(sp0),
            _ => Health::Ok,
        }
    }

    /// Online controller reset (as Linux's `megasas_reset_fusion`). Drains replies that already arrived, resets
    /// the adapter, re-initialises every reply queue, repeats IOC INIT on the same memory and
    /// CTRL_GET_INFO. Every request still on the controller is handed to `sink` exactly once:
    /// completed normally if its reply had arrived, else as [`IoOutcome::Reset`] after the
    /// adapter reset, when the firmware has provably forgotten it. If the adapter cannot be
    /// reset, it is stopped (STOP_ADAPTER) and marked dead, and its requests stay the device's:
    /// the caller turns bus mastering off and only then calls [`Controller::abandon_in_flight`].
    pub fn reset(&self, sink: &mut dyn FnMut(Completion), report: &mut Report) -> Result<(), Error> {
        let _w = self.gate.close();
        let g = self.generation;
        let mut budget = Budget::new(self.config.bringup_budget_us);
        let was_enabled = self.interrupts_enabled.load(Ordering::Acquire);
        self.mmio.write32(regs::INTR_MASK, regs::INTR_DISABLE_MASK);
        report.step(&self.mmio, g, 0, "OCR: start", String::new());
        // 1. Replies already posted belong to their requests.
        if !self.mistake(Mistake::QueuesNotResetAfterOcr) {
            for q in 0..self.limits.queues {
                self.reap_inner(q, sink);
            }
        }
        let sp0 = read_reg(&self.mmio, g, regs::SP0);
        let fault = FwStatus(sp0).state() == FwState::Fault;
        if self.ocr_disabled || (fault && sp0 & regs::SP0_FAULT_RESETTABLE == 0) {
            // Stop the adapter. A stopped adapter should do no more DMA, but only
            // the bus-master bit proves it: the requests stay held until the caller turned it
            // off (`abandon_in_flight`).
            self.mmio.write32(regs::DOORBELL, regs::DB_STOP_ADAPTER);
            self.dead.store(true, Ordering::Release);
            report.step(
                &self.mmio,
                g,
                0,
                "OCR: not possible, adapter stopped",
                alloc::format!("{}", Sp0(sp0)),
            );
            return Err(Error::ResetNotPossible { sp0 });
        }
        let mut last = Error::ResetFailed { attempts: 0, sp0 };
        for attempt in 1..=3u32 {
            match Self::diag_reset(&self.mmio, &self.delay, &self.config, &mut budget, report) {
                Ok(()) => {}
                Err(e) => {
                    last = e;
                    continue;
                }
            }
            // The adapter was reset: it has forgotten every SMID and address.
            self.return_in_flight(sink);
            if self.mistake(Mistake::PostDuringReset) {
                self.post_descriptor(desc(regs::DESC_SCSI_IO, 0, 1));
            }
            if !self.mistake(Mistake::QueuesNotResetAfterOcr) {
                self.reset_reply_queues();
            }
            let raw = (read_reg(&self.mmio, g, regs::SP0) & 0xFFFF) as u16;
            if raw.saturating_sub(1).min(MAX_FW_CMDS_CAP) < self.limits.max_fw_cmds {
                last = Error::Limits {
                    what: "SP0 max commands after reset",
                    value: u64::from(raw),
                    expected: "no fewer than at bring-up",
                };
                continue;
            }
            if let Err(e) = self.ioc_init(&mut budget, report) {
                last = e;
                continue;
            }
            let mut mbox = [0u8; 12];
            mbox[0] = 1;
            if let Err(e) = self.dcmd_inner(Some(&mut budget), DCMD_CTRL_GET_INFO, mbox, CTRL_INFO_LEN) {
                last = e;
                continue;
            }
            if was_enabled {
                self.enable_interrupts();
            }
            self.stats.resets.fetch_add(1, Ordering::Relaxed);
            report.step(
                &self.mmio,
                g,
                budget.used(),
                "OCR: done",
                alloc::format!("attempt {attempt}"),
            );
            return Ok(());
        }
        let sp0 = read_reg(&self.mmio, g, regs::SP0);
        report.step(&self.mmio, g, budget.used(), "OCR: failed", alloc::format!("{last}"));
        self.mmio.write32(regs::DOORBELL, regs::DB_STOP_ADAPTER);
        self.dead.store(true, Ordering::Release);
        // Whatever is still held (nothing if an attempt got as far as the adapter reset) stays
        // the device's until bus mastering is off (`abandon_in_flight`).
        Err(Error::ResetFailed { attempts: 3, sp0 })
    }

    /// For a controller out of service (its reset was not possible or failed), **after the
    /// caller turned the function's bus mastering off**: hands every request still held to
    /// `sink` exactly once, as [`IoOutcome::Reset`]. Until then they belong to the device.
    /// Returns how many; a controller that is not dead hands back nothing.
    pub fn abandon_in_flight(&self, sink: &mut dyn FnMut(Completion)) -> u32 {
        if !self.is_dead() {
            return 0;
        }
        let _w = self.gate.close();
        let mut n = 0u32;
        self.return_in_flight(&mut |c| {
            n += 1;
            sink(c);
        });
        n
    }

    fn return_in_flight(&self, sink: &mut dyn FnMut(Completion)) {
        for k in 0..usize::from(DCMD_SMIDS) {
            self.dcmd_reply_pending[k].store(false, Ordering::Release);
        }
        for smid in 1..=usize::from(self.limits.io_tags) {
            let state = &self.smids[smid];
            let slot = &state.slot;
            let Some(word) = slot.in_flight() else {
                continue;
            };
            if slot.finish(word) {
                self.stats.reset_returned.fetch_add(1, Ordering::Relaxed);
                sink(Completion {
                    tag: (smid - 1) as u32,
                    generation: SmidSlot::generation(word),
                    cookie: state.cookie.load(Ordering::Relaxed),
                    target: state.target.load(Ordering::Relaxed),
                    outcome: IoOutcome::Reset,
                    bytes_done: 0,
                });
            }
        }
    }

    /// Flushes the controller cache and shuts the firmware down (before power-off).
    pub fn shutdown(&self) -> Result<(), Error> {
        let mut mbox = [0u8; 12];
        mbox[0] = 0x03;
        self.dcmd(DCMD_CACHE_FLUSH, mbox, 0)?;
        self.dcmd(DCMD_SHUTDOWN, [0u8; 12], 0)?;
        Ok(())
    }
}

/// READ CAPACITY(10) data (last LBA and block size, big-endian) as a capacity; a last LBA of
/// 0xFFFFFFFF means the drive needs READ CAPACITY(16).
fn capacity_from_rc10(raw: &[u8]) -> Result<Capacity, String> {
    let last = u32::from_be_bytes([raw[0], raw[1], raw[2], raw[3]]);
    if last == u32::MAX {
        return Err(String::from("last LBA 0xFFFFFFFF (too large for the 10-byte form)"));
    }
    let mut as16 = [0u8; 12];
    as16[0..8].copy_from_slice(&u64::from(last).to_be_bytes());
    as16[8..12].copy_from_slice(&raw[4..8]);
    Capacity::parse(&as16).map_err(|e| alloc::format!("{e}"))
}

/// CDB length from the operation code's group (SPC): 6, 10, 12 or 16 bytes.
fn cdb_len(opcode: u8) -> u8 {
    match opcode >> 5 {
        0 => 6,
        1 | 2 => 10,
        5 => 12,
        _ => 16,
    }
}

fn desc(flags: u8, msix: u8, smid: u16) -> u64 {
    u64::from(flags) | (u64::from(msix) << 8) | (u64::from(smid) << 16)
}

/// Reads a register; on Aero re-reads up to 30 times while it reads 0, as Linux's
/// `megasas_readl` does for the Aero errata.
pub(crate) fn read_reg<M: Mmio>(mmio: &M, generation: Generation, off: u32) -> u32 {
    let mut v = mmio.read32(off);
    if generation.zero_read_glitch() {
        for _ in 0..AERO_ZERO_READ_RETRIES {
            if v != 0 {
                break;
            }
            v = mmio.read32(off);
        }
    }
    v
}

fn wait<M: Mmio, D: Delay>(
    delay: &D,
    budget: &mut Budget,
    us: u32,
    step: &'static str,
    mmio: &M,
    g: Generation,
) -> Result<(), Error> {
    if budget.used + u64::from(us) > budget.limit {
        return Err(Error::Deadline {
            step,
            sp0: read_reg(mmio, g, regs::SP0),
            budget_us: budget.limit,
        });
    }
    delay.delay_us(us);
    budget.used += u64::from(us);
    Ok(())
}

fn empty_info() -> ControllerInfo {
    ControllerInfo {
        vendor_id: 0,
        device_id: 0,
        subvendor_id: 0,
        subdevice_id: 0,
        product: String::new(),
        serial: String::new(),
        firmware: String::new(),
        package: String::new(),
        max_cmds: 0,
        max_sge: 0,
        max_request_sectors: 0,
        lds_present: 0,
        pds_present: 0,
    }
}

/// Converts an outcome into the MFI driver's error kinds, for callers mapping to blk statuses.
pub fn outcome_retryable(o: &IoOutcome) -> bool {
    match o {
        IoOutcome::Ok => false,
        IoOutcome::Reset => true,
        IoOutcome::Failed(e) => e.kind.is_retryable() || e.kind == IoErrorKind::Aborted,
    }
}
