//! The Fusion controller: bring-up, IOC INIT, pass-through DCMDs, LD I/O, reply queues, OCR.
//!
//! Concurrency: submitters and reapers enter `gate` through their reply queue's lane (a refusal,
//! never a spin, while a reset runs); an online controller reset closes it, so it owns the
//! controller exclusively (`drvkit::gate`: a count per lane, not one reader count that every
//! CPU's every I/O would write). A request descriptor is one 64-bit register write (or one 32-bit
//! write to Aero's atomic port), so posts need no lock; each reply queue has its own lock. A SMID's slot state is an atomic word
//! (generation and in-flight bit) so a reply for a SMID that is not in flight is recognised as
//! bogus and dropped.
//!
//! One concept per file:
//! - `bringup`: the READY transition, the limits from the scratch pads, the memory, IOC INIT,
//!   the diag reset, interrupt masking;
//! - `discovery`: MFI pass-through DCMDs (controller info, LD and PD lists, cache flush and
//!   shutdown) and each drive's READ CAPACITY at bring-up;
//! - `io`: validating a request, composing its frame (SGL, chain frame, RAID context) and posting
//!   its request descriptor;
//! - `reply`: walking a reply queue, validating each SMID and decoding what the firmware wrote;
//! - `mapsync`: the pended map sync that keeps the RAID map current, and the FastPath tables
//!   it switches;
//! - `jbodmap`: the JBOD sequence map (system PDs by device handle and sequence number) and its
//!   pended sync;
//! - `reset`: the FAULT watchdog and online controller reset, which hands every request still
//!   held back exactly once;
//! - `mistake`: the test hook that makes the driver commit a named mistake.
//!
//! This file holds what they share: the frame layout, the types, the controller's state and its
//! accessors.

mod bringup;
mod discovery;
mod io;
mod jbodmap;
mod mapsync;
mod mistake;
mod reply;
mod reset;

use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU8, AtomicU16, AtomicU32, AtomicU64, Ordering};

use crate::slot::SmidSlot;

use crate::Mmio64;
use devhal::{Delay, Mmio};
use megasas::dcmd::ControllerInfo;
use megasas::{IoError, IoErrorKind};
use spin::Mutex;

use drvkit::gate::Gate;

use crate::error::Error;
use crate::raidmap::{FastPathLd, MirrorLoad};
use crate::regs::{self, Generation};
use devhal::DmaBuf;
use mapsync::{FastPathTables, MapSync};

pub use bringup::Limits;
pub use io::{Entered, Validated};
pub use jbodmap::{DCMD_SYSTEM_PD_MAP_GET_INFO, JbodRoute};
pub use mistake::Mistake;
pub use reply::IntxResult;
pub use reset::Health;

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
/// Bytes of the MFI frame of each DCMD SMID.
const MFI_FRAME_LEN: usize = 256;
/// Largest `max_fw_cmds` the driver uses; keeps the reply depth within its u16 field.
const MAX_FW_CMDS_CAP: u16 = 8191;
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
/// DCMD opcodes.
pub const DCMD_CTRL_GET_INFO: u32 = 0x0101_0000;
/// LD_GET_LIST.
pub const DCMD_LD_GET_LIST: u32 = 0x0301_0000;
/// CTRL_CACHE_FLUSH.
pub const DCMD_CACHE_FLUSH: u32 = 0x0110_1000;
/// CTRL_SHUTDOWN.
pub const DCMD_SHUTDOWN: u32 = 0x0105_0000;
/// Zero-read retries on Aero (Linux's `megasas_readl` errata loop).
const AERO_ZERO_READ_RETRIES: usize = 30;

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
    /// Use RDPQ (one separately allocated ring per reply queue, given to IOC INIT in the RDPQ
    /// array) when SP1 bit 23 offers it, as Linux does; `false` keeps the contiguous rings.
    pub rdpq: bool,
    /// Read the RAID map when the firmware announces one (SP2, Ventura/Aero) and send RAID-0
    /// reads and writes inside one strip by FastPath to the member disk, as Linux does;
    /// `false` keeps every LD command on the firmware LD path.
    pub fastpath: bool,
    /// Test only (`megasas.rdpq_fault=window`): the RDPQ array gives the second reply ring a
    /// base in the next 4 GiB window, outside the window its group shares, so a firmware that
    /// checks the array refuses IOC INIT. Never set outside tests of that refusal.
    pub rdpq_window_fault: bool,
    /// Reply queues 0..n are high-IOPS queues whose interrupts the firmware coalesces
    /// (balanced mode, [`crate::layout::plan`]); 0: latency mode. Bring-up uses it only when
    /// SP1 still offers coalescing once the firmware is READY and a latency queue remains.
    pub high_iops_queues: u16,
    /// IOPS mode ([`crate::layout::PerfMode::Iops`]): the firmware coalesces the interrupts of
    /// every whole group of 8 reply queues. Bring-up uses it only when SP1 still offers
    /// coalescing once the firmware is READY.
    pub coalesce_every_queue: bool,
    /// The PCIe link limits RAID-1 writes ([`crate::layout::pcie_bw_limited`], Linux's
    /// `pcie_bw_limitation`): a RAID-1 write over 32 KiB takes the LD path with raid_flags
    /// sub-type LDIO_BW_LIMIT, where the firmware writes both disks from one transfer, and so do
    /// the next small RAID-1 writes to that LD while its hint lasts.
    pub pcie_bw_limited: bool,
    /// Use the JBOD sequence map when CTRL_GET_INFO offers it, as Linux does (system PDs by
    /// device handle and sequence number); `false` keeps them on the path by device id.
    pub jbod_map: bool,
    /// Test hook: commit this mistake. It exists only in test builds (`cfg(test)` or the
    /// `fake` feature): a production build cannot set it, and every check of it is the
    /// constant `false` there (about 40 compares per I/O on the hot paths).
    #[cfg(any(test, feature = "fake"))]
    #[doc(hidden)]
    pub mistake: Option<Mistake>,
    /// Test hook: every request frame is composed by the general builder, field by field (the
    /// reference the word-by-word LD read/write frame is checked against).
    #[cfg(any(test, feature = "fake"))]
    #[doc(hidden)]
    pub general_frames: bool,
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
            rdpq: true,
            fastpath: true,
            rdpq_window_fault: false,
            high_iops_queues: 0,
            coalesce_every_queue: false,
            pcie_bw_limited: false,
            jbod_map: true,
            #[cfg(any(test, feature = "fake"))]
            mistake: None,
            #[cfg(any(test, feature = "fake"))]
            general_frames: false,
        }
    }

    /// Whether LD reads and writes may take the word-by-word frame (no test hook asks for a
    /// mistake or for the general builder; always true outside test builds).
    #[inline(always)]
    fn word_frames(&self) -> bool {
        #[cfg(any(test, feature = "fake"))]
        {
            self.mistake.is_none() && !self.general_frames
        }
        #[cfg(not(any(test, feature = "fake")))]
        {
            true
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

/// How a request ended. An explicit tag byte (`Ok` is 0), not a niche in the error's fields:
/// the completion path's test for `Ok` is one compare, not a decode of the niche.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum IoOutcome {
    /// Success.
    Ok,
    /// The firmware reported an error.
    Failed(IoError),
    /// An online controller reset dropped the request; the controller no longer owns it (its
    /// buffer is free) and it may be re-issued.
    Reset,
    /// The firmware refused a FastPath request because the RAID map it was routed with is stale
    /// (its sequence number, MFI status 0x67): nothing moved, FastPath is now off, and the
    /// request may be re-issued (it then takes the LD path).
    StaleMap,
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
    /// 1 + the PD id a RAID-1 FastPath read of this SMID is counted outstanding on (0: none);
    /// taken back (swapped to 0) by whichever hands the request back, reply or reset.
    mirror_pd: AtomicU16,
    /// 1 + the device (see [`BUSY_DEVICES`]) this request counts outstanding on in balanced mode
    /// (0: none); taken back by whichever hands the request back, reply or reset.
    busy_device: AtomicU16,
    /// A RAID-1 FastPath write sent as a pair (this SMID and its peer, SMID + max_fw_cmds):
    /// [`PAIR_IN_FLIGHT`] and which halves answered; 0 otherwise.
    pair: AtomicU8,
    /// Requests this one holds in [`Controller::fw_outstanding`] (1, or 2 for a RAID-1 write
    /// pair; 0: not counted); taken back by whichever hands the request back, reply or reset.
    on_firmware: AtomicU8,
}

/// [`SmidState::pair`]: the request is a RAID-1 FastPath write pair on the controller.
const PAIR_IN_FLIGHT: u8 = 1;
/// [`SmidState::pair`]: the half on the request's own SMID answered.
const PAIR_PRIMARY_ANSWERED: u8 = 2;
/// [`SmidState::pair`]: the half on the peer SMID answered.
const PAIR_PEER_ANSWERED: u8 = 4;

/// Devices whose outstanding requests balanced mode counts: LD targets 0..256, then system PDs
/// (device ids 0..256).
const BUSY_DEVICES: usize = 512;

/// A RAID-1 write over this many bytes goes on the LD path on a PCIe-bandwidth-limited
/// controller (Linux's `MR_LARGE_IO_MIN_SIZE`).
pub(crate) const R1_LARGE_WRITE_BYTES: u32 = 32 * 1024;
/// The LD-path hint a large RAID-1 write leaves (Linux's `MR_R1_LDIO_PIGGYBACK_DEFAULT`): each
/// small write takes one off, and goes on the LD path while what it leaves is above 0 (the next
/// three).
pub(crate) const R1_LDIO_HINT: u32 = 4;

impl SmidState {
    fn new() -> Self {
        Self {
            slot: SmidSlot::new(),
            cookie: AtomicU64::new(0),
            required: AtomicU32::new(0),
            target: AtomicU8::new(0),
            // The frame pool starts zeroed.
            sgl_slots: AtomicU8::new(0),
            mirror_pd: AtomicU16::new(0),
            busy_device: AtomicU16::new(0),
            pair: AtomicU8::new(0),
            on_firmware: AtomicU8::new(0),
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
    /// LD reads and writes sent by FastPath to a member disk.
    pub fastpath_ios: AtomicU64,
    /// FastPath requests the firmware refused for a stale map (sequence number): FastPath is
    /// then off and they are issued again on the LD path.
    pub stale_map_refusals: AtomicU64,
    /// RAID-1 FastPath reads sent to the LD's data arm ([0]) and to its mirror ([1]).
    pub raid1_reads: [AtomicU64; 2],
    /// RAID-1 FastPath writes, each sent as a pair (one request per arm).
    pub raid1_write_pairs: AtomicU64,
    /// RAID-1 writes sent on the LD path because a pair would have taken the requests on the
    /// firmware past the I/O tags.
    pub raid1_pairs_over_depth: AtomicU64,
    /// RAID-1 writes a FastPath pair could have carried, sent on the LD path because the PCIe
    /// link limits the controller ([`Config::pcie_bw_limited`]): over 32 KiB, or small ones
    /// while the LD's hint lasts after one.
    pub raid1_bw_limited_ld_writes: AtomicU64,
    /// Requests sent to a high-IOPS reply queue (balanced mode, a busy device); the batches of
    /// 16 that choose the queue count on it.
    pub high_iops_ios: AtomicU64,
}

struct ReplyQueue {
    last_idx: u32,
    /// The index has wrapped at least once (only the `HostIndexNoWrap` test hook uses it).
    wrapped: bool,
}

struct Memory {
    frames: DmaBuf,
    chains: DmaBuf,
    chain_stride: usize,
    sense: DmaBuf,
    replies: ReplyRings,
    init: DmaBuf,
    dcmd: DmaBuf,
    /// The two RAID map buffers (the size SP2 announces), when the firmware has a dynamic map:
    /// the map in use, and the one the pended map sync lends the firmware (`mapsync`).
    raid_map: Option<[DmaBuf; 2]>,
    /// The two JBOD map buffers (the map in use, and the one the pended JBOD sync lends the
    /// firmware), from Invader on (`jbodmap`).
    jbod_map: Option<[DmaBuf; 2]>,
}

/// The reply descriptor rings: one buffer holding every queue's ring back to back (contiguous
/// mode, the ring base given to IOC INIT), or one buffer per queue listed in an RDPQ array.
struct ReplyRings {
    /// Contiguous mode: one buffer. RDPQ: one per reply queue.
    bufs: Vec<DmaBuf>,
    /// RDPQ only: the array of {u64 ring base, two reserved dwords} given to IOC INIT.
    rdpq_array: Option<DmaBuf>,
    /// Bytes per ring (depth × 8).
    ring_bytes: usize,
}

impl ReplyRings {
    /// Queue `q`'s ring: its buffer and the ring's offset in it.
    #[inline(always)]
    fn ring(&self, q: usize) -> (&DmaBuf, usize) {
        if self.rdpq_array.is_some() {
            (&self.bufs[q], 0)
        } else {
            (&self.bufs[0], q * self.ring_bytes)
        }
    }

    /// The address IOC INIT's ReplyDescriptorPostQueueAddress carries.
    fn init_address(&self) -> u64 {
        match &self.rdpq_array {
            Some(a) => a.phys(),
            None => self.bufs[0].phys(),
        }
    }

    /// Sets every slot of every ring to all-ones (unused).
    fn fill_unused(&self) {
        for b in &self.bufs {
            b.fill(0, b.len(), 0xFF);
        }
    }
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
    /// The FastPath-ready LDs (RAID-0, RAID-1 reads) of the map in use, per lane; off while no
    /// valid map is in use, after the firmware refuses a FastPath request as stale, and while a
    /// changed map is being taken (`mapsync`).
    fastpath: FastPathTables,
    /// The pended map sync.
    map_sync: MapSync,
    /// Outstanding RAID-1 FastPath reads and last blocks per PD: which arm takes the next read.
    mirror_load: MirrorLoad,
    /// SMIDs max_fw_cmds + 1 ..= 2 × max_fw_cmds exist (frames and sense slots) for the peer
    /// halves of RAID-1 FastPath writes: Ventura and later with a RAID map and FastPath on.
    peer_smids: bool,
    /// With peer SMIDs: the I/O requests on the firmware, peer halves included (Linux's
    /// `fw_outstanding`). A RAID-1 write goes as a pair only while that keeps the count within
    /// the I/O tags, as Linux keeps it within `can_queue`.
    fw_outstanding: AtomicU32,
    /// With [`Config::pcie_bw_limited`]: per LD target, how many more small RAID-1 writes take
    /// the LD path after a large one (Linux's `r1_ldio_hint`, set to 4 at the start and by each
    /// large write); empty otherwise.
    r1_ldio_hint: Vec<AtomicU32>,
    /// The JBOD sequence map and its pended sync.
    jbod: jbodmap::JbodMap,
    /// The generation's part of an LD read or write frame.
    ld_frame: io::LdFrame,
    /// Balanced mode: requests outstanding per device ([`BUSY_DEVICES`]), Linux's per-device
    /// busy count; empty in latency mode, where nothing counts.
    busy: Vec<AtomicU32>,
    /// Counters.
    pub stats: Stats,
}

fn sge_bytes(addr: u64, len: u32, flags: u8) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[0..8].copy_from_slice(&addr.to_le_bytes());
    b[8..12].copy_from_slice(&len.to_le_bytes());
    b[15] = flags;
    b
}

impl<M: Mmio64, D: Delay> Controller<M, D> {
    #[inline(always)]
    fn mistake(&self, m: Mistake) -> bool {
        self.config.commits(m)
    }

    /// Test hook: the 256 bytes of SMID `smid`'s request frame as they are in memory now (None:
    /// no such frame).
    #[cfg(any(test, feature = "fake"))]
    #[doc(hidden)]
    pub fn frame_bytes(&self, smid: u16) -> Option<[u8; FRAME_SIZE]> {
        let at = FRAME_SIZE * usize::from(smid);
        if at + FRAME_SIZE > self.mem.frames.len() {
            return None;
        }
        let mut b = [0u8; FRAME_SIZE];
        self.mem.frames.read_bytes(at, &mut b);
        Some(b)
    }

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
    /// The high-IOPS reply queues (0..n; 0 in latency mode). The latency queues follow them.
    pub fn high_iops_queues(&self) -> u16 {
        self.limits.high_iops_queues
    }
    /// The latency reply queues, one per submitting hardware queue: hardware queue h submits
    /// with reply queue `high_iops_queues() + h`.
    pub fn io_queues(&self) -> u16 {
        self.limits.queues - self.limits.high_iops_queues
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
    /// The RAID-0 LDs FastPath serves (empty: every LD command takes the LD path).
    pub fn fastpath_lds(&self) -> Vec<FastPathLd> {
        self.fastpath.current()
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
}

fn desc(flags: u8, msix: u8, smid: u16) -> u64 {
    u64::from(flags) | (u64::from(msix) << 8) | (u64::from(smid) << 16)
}

/// A FastPath descriptor: the device handle in bits 63:48, as Linux's `SCSIIO.DevHandle`.
fn desc_with_handle(flags: u8, msix: u8, smid: u16, handle: u16) -> u64 {
    desc(flags, msix, smid) | (u64::from(handle) << 48)
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

/// Converts an outcome into the MFI driver's error kinds, for callers mapping to blk statuses.
pub fn outcome_retryable(o: &IoOutcome) -> bool {
    match o {
        IoOutcome::Ok => false,
        IoOutcome::Reset | IoOutcome::StaleMap => true,
        IoOutcome::Failed(e) => e.kind.is_retryable() || e.kind == IoErrorKind::Aborted,
    }
}
