//! A strict model of MegaRAID Fusion firmware, for host tests.
//!
//! Personalities: Thunderbolt, Invader (SAS3108), Ventura (SAS35xx), Aero (SAS39xx), differing in
//! the SP1 queue field, combined-mode threshold, RAID-context layout, chain/end-of-list flags,
//! the atomic descriptor port and the Aero zero-read glitch. The firmware state machine runs on a
//! virtual clock advanced by [`FakeDelay`] (the driver's waits) and [`FakeFusion::advance`].
//!
//! Every protocol rule a driver can break (those Linux and FreeBSD keep) is checked, and a
//! broken one is recorded as a named
//! [`Violation`]; the offending command is refused (it never completes). DMA goes through
//! [`devhal::fake::FakeMemory`], so a stray address is recorded there instead of touching memory.
//! Data moves when a reply is posted (reads and writes alike), so a test can tell whether the
//! device touched a buffer after its request ended. After a diag reset or doorbell 0x07 the
//! model forgets every command: it never DMAs for old commands.
//!
//! Written from Linux's `megaraid_sas`, FreeBSD's `mrsas` and the MPI 2 headers, independently
//! of the driver's constants.

use alloc::collections::VecDeque;
use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;

use devhal::fake::{FakeDma, FakeMemory, le_u16, le_u32, le_u64, sgl_pieces};
use devhal::{Delay, Mmio};
use spin::Mutex;

use crate::regs::Generation;

/// Request descriptor writes the model saw, by form (each one commits a descriptor).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DescriptorWrites {
    /// A 0xC0 low dword, then the 0xC4 high dword.
    pub pairs: u64,
    /// One 8-byte write to 0xC0.
    pub wide: u64,
    /// One 32-bit write to Aero's atomic port 0xC8.
    pub atomic: u64,
}

/// The JBOD sequence map: {u32 size, u32 count} and 8 bytes per device id (Linux's
/// `MR_PD_CFG_SEQ_NUM_SYNC` for 256 PDs).
const JBOD_MAP_BYTES: usize = 8 + 256 * 8;
/// A system PD's device handle in the JBOD map: 0x100 + its device id.
const JBOD_HANDLE_BASE: u16 = 0x100;
/// The JBOD map's first sequence number.
const JBOD_SEQ_FIRST: u16 = 0x0201;

/// A driver mistake the model detected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Violation {
    /// A descriptor posted while the firmware is not OPERATIONAL (other than IOC INIT in READY).
    PostNotOperational,
    /// IOC INIT posted through the atomic port.
    IocInitViaAtomicPort,
    /// IOC INIT posted again without a reset.
    IocInitTwice,
    /// The IOC INIT MFI frame is not 256-byte aligned (address bits leak into the flags byte).
    InitFrameMisaligned,
    /// The IOC INIT frame's cmd_status was not preset to 0xFF.
    InitStatusNotPreset,
    /// The IOC INIT MFI frame or the MPI2 request has a wrong fixed field.
    InitBadFrame,
    /// Reply queue depth not a multiple of 16, or below the commands the firmware can post.
    BadQueueDepth,
    /// HostMSIxVectors above the SP1 queue count or the MSI-X table.
    TooManyMsixVectors,
    /// RDPQ array mode requested without SP1 bit 23.
    RdpqNotSupported,
    /// A replyqueue_mask in the INIT frame without SP1 bit 26, or naming a group of 8 queues
    /// beyond HostMSIxVectors.
    BadCoalescingMask,
    /// SYSTEM_PD_MAP_GET_INFO the controller information does not offer or with a buffer below
    /// the map's 2056 bytes, or a system-PD request by device handle that does not match the JBOD
    /// map (handle, target = device id + 255, FastPath flag) or names a sequence number no map
    /// ever had.
    BadJbodMapRequest,
    /// An RDPQ array entry with a zero or misaligned ring base, non-zero reserved dwords, or a
    /// ring overlapping another.
    RdpqBadEntry,
    /// An RDPQ ring crossing a 4 GiB boundary, or outside the 4 GiB window of its group (8 rings
    /// on Invader, 16 on Ventura and later).
    RdpqWindow,
    /// A reply slot was not all-ones at IOC INIT.
    ReplySlotsNotAllOnes,
    /// SMID 0 or beyond the pool.
    BadSmid,
    /// A SMID posted again while still outstanding.
    SmidOutstanding,
    /// Function 0 without a FastPath descriptor, or an unknown Function.
    BadFunction,
    /// 0xC4 written without a fresh 0xC0 write.
    HighWithoutFreshLow,
    /// Two 0xC0 writes in a row.
    LowTwice,
    /// An 8-byte write to a register other than the request descriptor port 0xC0.
    WideWrite,
    /// MSIxIndex not below HostMSIxVectors (or non-zero without MSI-X).
    BadMsixIndex,
    /// The descriptor type does not match the frame's Function / CDB.
    DescriptorFunctionMismatch,
    /// FastPath without a RAID map.
    FastPathWithoutMap,
    /// ChainOffset not 0 or 0x0F (or 0 with a chain element).
    BadChainOffset,
    /// ChainOffset 0x0F without a chain element in slot 7.
    ChainOffsetWithoutChain,
    /// Chain Length not 16 × the SGEs in the chain frame.
    ChainLengthMismatch,
    /// A chain element outside slot 7.
    ChainNotInSlot7,
    /// A chain element inside the chain frame.
    NestedChain,
    /// No end-of-list flag on the last SGE (Invader and later).
    MissingEndOfList,
    /// An end-of-list flag before the last SGE.
    EarlyEndOfList,
    /// RAID-context num_sge differs from the SGEs present.
    NumSgeMismatch,
    /// SGE lengths do not add up to DataLength.
    SglLengthMismatch,
    /// More SGEs than max_num_sge.
    TooManySges,
    /// An SGE of length 0.
    ZeroLengthSge,
    /// Control direction inconsistent with the CDB.
    DirectionMismatch,
    /// DataLength differs from blocks × block size.
    DataLengthMismatch,
    /// Sense address outside DMA memory (the sense pool's window).
    SenseOutsidePool,
    /// Sense buffer length 0.
    SenseLengthZero,
    /// Host index names a queue that does not exist.
    HostIndexWrongQueue,
    /// Host index written to the wrong register for the queue mode.
    HostIndexWrongRegister,
    /// Host index not below the queue depth (not wrapped).
    HostIndexBeyondDepth,
    /// Host index ahead of the producer.
    HostIndexBeyondProducer,
    /// The host index moved past a reply slot the driver had not consumed (not all-ones).
    HostIndexSkipsReplies,
    /// A reply slot was not all-ones when the producer reached it (overrun).
    ReplySlotNotFree,
    /// The producer caught the consumer: the host index is not being advanced.
    QueueFull,
    /// Replies posted but never consumed (host index behind the producer at [`FakeFusion::audit`]).
    RepliesNotConsumed,
    /// A control address at or above 4 GiB without 64-bit support.
    AddressAbove4G,
    /// An all-ones address (faults Ventura/Aero).
    AllOnesAddress,
    /// A doorbell command the current state does not accept.
    DoorbellWrongState,
    /// A doorbell write while bit 0 still reads 1.
    DoorbellWhileBusy,
    /// The atomic port used before IOC INIT, or without SP1 bit 24, or on a generation without it.
    AtomicPortNotAllowed,
    /// A DCMD or TM off reply queue 0 (not known to be refused by firmware; recorded as a warning).
    DcmdOffQueue0,
    /// The pass-through frame is malformed.
    BadPassthrough,
    /// A DCMD without data sent with an SGE or a data direction (Linux and FreeBSD send
    /// sge_count 0 and DIR_NONE).
    NoDataDcmdWithSge,
    /// A non-read/write LD command carrying the read/write RAID-context fields (type/nseg,
    /// region-lock flags or the sequence number), which Linux and FreeBSD leave zero.
    NonRwRaidContext,
    /// A system-PD (FastPath, DevHandle 0xFFFF) request with a wrong IoFlags FastPath bit.
    BadSystemPdRequest,
    /// CTRL_GET_INFO or LD_GET_LIST with a buffer below Linux's structure size (refused with
    /// status 0x03, as firmware checking the size would).
    DcmdBufferTooSmall,
    /// LD_MAP_GET_INFO with a buffer other than the size SP2 announces (Linux gives exactly
    /// that size).
    RaidMapBufferSize,
    /// A FastPath request (Function 0, FP_IO) to a device handle that is in no map, or whose
    /// descriptor DevHandle differs from the frame's.
    FastPathBadHandle,
    /// A FastPath request to a RAID member that is not a read or write with the FastPath
    /// IoFlags bit, the LD's target in the RAID context and the arm's span/arm byte.
    FastPathBadRequest,
    /// A FastPath read or write whose disk blocks are not inside one strip of the LD's data on
    /// that arm: the driver's striping differs from the firmware's.
    FastPathOutsideStrip,
    /// A RAID-1 FastPath write that is no well-formed half of a pair: the peer SMID (RAID
    /// context +0x14) 0, out of range, its own or already another's peer; a second half that
    /// does not name the first, goes to the same arm or writes other blocks; or a SMID a first
    /// half named coming as anything but its mirror write.
    Raid1PairMalformed,
    /// A SMID above max_fw_cmds (Ventura and later keep them for RAID-1 FastPath peer writes)
    /// used for anything else, or on a generation without peer SMIDs.
    PeerSmidMisused,
    /// A FastPath request whose cache-bypass marks (G35 routing flag SLD, raid_flags sub-type
    /// CACHE_BYPASS) differ from Linux's: both on a write to an LD whose map offers
    /// `fp_cache_bypass_capable`, neither on anything else.
    CacheBypassFlags,
    /// A RAID-1 FastPath write over 32 KiB on a controller whose PCIe link limits RAID-1 writes
    /// (Linux sends those on the LD path).
    LargeRaid1FastPathWrite,
    /// The LD path's raid_flags sub-type LDIO_BW_LIMIT on anything but a RAID-1 write over
    /// 32 KiB of a PCIe-bandwidth-limited controller.
    LdioBwLimitMisused,
}

/// `MR_LD_RAID` capability: FastPath writes.
const CAP_FP_WRITE: u32 = 1 << 20;
/// `MR_LD_RAID` capability `fp_cache_bypass_capable`.
const CAP_FP_CACHE_BYPASS: u32 = 1 << 29;
/// raid_flags IO sub-type of a large RAID-1 LD-path write on a PCIe-bandwidth-limited controller.
const LDIO_BW_LIMIT: u8 = 7;
/// Linux's `MR_LARGE_IO_MIN_SIZE`: RAID-1 writes above it are large.
const LARGE_IO_BYTES: u32 = 32 * 1024;

/// One half of a RAID-1 FastPath write, waiting for its peer (kept by the peer's SMID).
#[derive(Clone, Copy, Debug)]
struct Raid1Half {
    smid: u16,
    arm: usize,
    lba: u64,
    blocks: u32,
}

/// A RAID-0 LD of the model, described by a dynamic RAID map: its data lives on the member
/// disks, strip by strip, as the firmware stripes it. With `mirror`, a RAID-1 LD instead: two
/// disks holding the same blocks; the LD path writes both and reads the first, FastPath serves
/// reads from either and, when `caps` offers FastPath writes, writes as pairs (one request per
/// arm, each naming the other's SMID, as Ventura and later firmware takes them; the emulation
/// does the same).
#[derive(Clone, Debug)]
pub struct FakeRaid0 {
    /// LD target id.
    pub target: u8,
    /// Member PD ids (device handle 0x100 + id), in arm order.
    pub pds: Vec<u16>,
    /// log2 of the strip size in blocks.
    pub strip_shift: u8,
    /// Strips per arm.
    pub rows: u64,
    /// The LD's configuration sequence number.
    pub seq: u16,
    /// `MR_LD_RAID` capability word.
    pub caps: u32,
    /// RAID-1 over the two PDs (the map says level 1, one data arm).
    pub mirror: bool,
    /// Bytes written over the map at an offset before it goes to the driver (out-of-range values).
    pub damage: Option<(usize, Vec<u8>)>,
}

impl FakeRaid0 {
    /// RAID-0 over `pds` with 64 KiB strips (2^7 blocks), FastPath reads and writes.
    pub fn new(target: u8, pds: &[u16], rows: u64) -> Self {
        Self {
            target,
            pds: pds.to_vec(),
            strip_shift: 7,
            rows,
            seq: 0x0101,
            caps: crate::raidmap::CAPS_FP_READ_WRITE,
            mirror: false,
            damage: None,
        }
    }
    /// RAID-1 over PDs `pds` with 64 KiB strips, FastPath reads only.
    pub fn mirror(target: u8, pds: [u16; 2], rows: u64) -> Self {
        Self {
            caps: crate::raidmap::CAPS_FP_READ,
            mirror: true,
            ..Self::new(target, &pds, rows)
        }
    }
    /// Blocks of the LD.
    pub fn blocks(&self) -> u64 {
        (self.rows << self.strip_shift) * if self.mirror { 1 } else { self.pds.len() as u64 }
    }
    /// The arm and disk block of LD block `lba` (the firmware's striping; a mirror's first arm).
    fn place(&self, lba: u64) -> (usize, u64) {
        if self.mirror {
            return (0, lba);
        }
        let strip = lba >> self.strip_shift;
        let arms = self.pds.len() as u64;
        let row = strip / arms;
        (
            (strip % arms) as usize,
            (row << self.strip_shift) | (lba & ((1 << self.strip_shift) - 1)),
        )
    }
}

/// Where the firmware starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartState {
    /// Power-on: UNDEFINED, FW_INIT, DEVICE_SCAN, then READY.
    PowerOn,
    /// WAIT_HANDSHAKE, needing doorbell 0x18 (then BOOT_MESSAGE_PENDING needing 0x10).
    WaitHandshake,
    /// BOOT_MESSAGE_PENDING, needing doorbell 0x10.
    BootMessagePending,
    /// OPERATIONAL, left by an earlier driver (needs doorbell 0x07).
    Operational,
    /// FAULT (resettable or not).
    Fault {
        /// SP0 bit 1.
        resettable: bool,
    },
    /// READY.
    Ready,
}

/// Model configuration.
#[derive(Clone, Debug)]
pub struct FakeConfig {
    /// Generation.
    pub generation: Generation,
    /// SP0[15:0].
    pub raw_cmds: u16,
    /// Reply queues in SP1.
    pub fw_queues: u16,
    /// MSI-X table size.
    pub msix_table: u16,
    /// SP0 bit 26.
    pub msix_capable: bool,
    /// SP1[9:5].
    pub chain_units: u8,
    /// SP1[22].
    pub chain_512: bool,
    /// SP1[24] (FW SYNC CACHE; on Aero also the atomic port).
    pub bit24: bool,
    /// SP1[23].
    pub rdpq: bool,
    /// SP1[25].
    pub ctrl64: bool,
    /// SP1[26]: interrupt coalescing offered (IOC INIT may then name coalesced queue groups in
    /// the INIT frame's replyqueue_mask). Off by default, as the minimum firmware.
    pub coalescing: bool,
    /// CTRL_GET_INFO adapterOperations3 bit 24 (useSeqNumJbodFP): the JBOD sequence map
    /// (SYSTEM_PD_MAP_GET_INFO) is offered; system PDs then take requests by device handle
    /// (0x100 + device id) with the map's sequence number. Off by default.
    pub jbod_map: bool,
    /// The dynamic RAID map's device-handle table lists every system PD (handle 0x100 + device
    /// id), as real firmware's does; a system-PD request by that handle (target = device id, no
    /// sequence number, the FastPath IoFlag) is then served. Off by default.
    pub raid_map_jbod_handles: bool,
    /// The PCIe link limits RAID-1 writes, as Linux judges it (every Ventura, an Aero below
    /// 16 GT/s): a RAID-1 FastPath write over 32 KiB is then a violation, and the LD path's
    /// raid_flags sub-type LDIO_BW_LIMIT is allowed on RAID-1 writes over 32 KiB. Default: on for
    /// Ventura (the link is the host's to report; an Aero test sets it).
    pub pcie_bw_limited: bool,
    /// Start state.
    pub start: StartState,
    /// Virtual microseconds in each power-on state.
    pub state_delay_us: u64,
    /// Virtual microseconds doorbell bit 0 stays set after a doorbell write.
    pub doorbell_busy_us: u64,
    /// I/O reply delay range (virtual microseconds), chosen at random per command.
    pub io_delay_us: (u64, u64),
    /// DCMD reply delay after cmd_status is written.
    pub dcmd_reply_delay_us: u64,
    /// Logical drives: (target, blocks).
    pub lds: Vec<(u8, u64)>,
    /// Bytes per block.
    pub block_size: u32,
    /// CTRL_GET_INFO OnOff bit 10.
    pub ocr_disabled: bool,
    /// The firmware faults (resettable) when this DCMD opcode arrives.
    pub fault_on_dcmd: Option<u32>,
    /// Virtual microseconds SP0 keeps showing READY after IOC INIT wrote cmd_status 0 (no
    /// source says the two happen together). Commands are accepted meanwhile.
    pub operational_lag_us: u64,
    /// Bytes of READ CAPACITY(16) data the firmware returns (32 = all; fewer gives the 0x2D +
    /// GOOD underrun with DataLength = bytes moved).
    pub capacity16_bytes: usize,
    /// READ CAPACITY(16) is refused with ILLEGAL REQUEST (only (10) works).
    pub no_read_capacity16: bool,
    /// READ CAPACITY(10) is refused with ILLEGAL REQUEST.
    pub no_read_capacity10: bool,
    /// CTRL_GET_INFO max_lds (> 64: 256-VD firmware; LD_GET_LIST lists targets ≥ 64 only when
    /// asked with mbox b[0] = 1).
    pub max_lds: u8,
    /// After a diag reset the firmware shows FAULT (resettable bit clear) for this long between
    /// BB_INIT and FW_INIT (Linux waits a FAULT out during an OCR).
    pub fault_while_restarting_us: u64,
    /// A failed IOC INIT (see [`FakeFusion::fail_next_init`]) also puts the firmware in a
    /// resettable FAULT (Linux diag-resets and retries IOC INIT once at probe).
    pub fault_on_failed_init: bool,
    /// Virtual microseconds from the diag reset to READY (real cards take seconds).
    pub reset_to_ready_us: u64,
    /// Doorbell bit 0 reads 1 from power-on until this virtual time (or the next doorbell
    /// write), e.g. left by a previous driver (Linux writes the handshake doorbell
    /// without looking).
    pub doorbell_busy_at_start_us: u64,
    /// System PDs (JBOD): (device id, blocks), exposed through PD_LIST_QUERY and reached with
    /// Function 0x00 + FP_IO, DevHandle 0xFFFF, RAID-context target = device id, raid_flags 0x10.
    pub system_pds: Vec<(u16, u64)>,
    /// SP2 bits 24:16 on Ventura and Aero: the dynamic RAID map's size in 64 KiB units (0: no
    /// RAID map DCMD). Invader answers the map DCMD in the legacy 64-LD format, or in the
    /// extended one when it offers 256 LDs (`max_lds` above 64 or `ext_lds`) and IOC INIT set
    /// max_255lds.
    pub raid_map_units: u16,
    /// CTRL_GET_INFO adapterOperations3 bit 5 (supportMaxExtLDs): 256 LDs offered.
    pub ext_lds: bool,
    /// A RAID-0 LD (listed with the LDs) in the RAID map, reachable by FastPath.
    pub raid0: Option<FakeRaid0>,
    /// Random seed.
    pub seed: u64,
}

impl FakeConfig {
    /// A personality with two small LDs.
    pub fn new(generation: Generation) -> Self {
        Self {
            generation,
            raw_cmds: 256,
            fw_queues: match generation {
                Generation::Thunderbolt => 16,
                Generation::Invader => 96,
                _ => 128,
            },
            msix_table: match generation {
                Generation::Thunderbolt => 16,
                Generation::Invader => 97,
                _ => 128,
            },
            msix_capable: true,
            chain_units: 8,
            chain_512: false,
            bit24: generation == Generation::Aero,
            rdpq: generation >= Generation::Ventura,
            ctrl64: generation >= Generation::Ventura,
            coalescing: false,
            jbod_map: false,
            raid_map_jbod_handles: false,
            pcie_bw_limited: generation == Generation::Ventura,
            start: StartState::PowerOn,
            state_delay_us: 20_000,
            doorbell_busy_us: 500,
            io_delay_us: (1, 200),
            dcmd_reply_delay_us: 1_000,
            lds: vec![(0, 8192), (3, 4096)],
            block_size: 512,
            ocr_disabled: false,
            fault_on_dcmd: None,
            operational_lag_us: 3_000,
            fault_while_restarting_us: 0,
            fault_on_failed_init: false,
            reset_to_ready_us: 250_000,
            doorbell_busy_at_start_us: 0,
            capacity16_bytes: 32,
            no_read_capacity16: false,
            no_read_capacity10: false,
            max_lds: 64,
            system_pds: Vec::new(),
            raid_map_units: u16::from(generation >= Generation::Ventura),
            ext_lds: false,
            raid0: None,
            seed: 0x5EED,
        }
    }
    /// Invader (SAS3108).
    pub fn invader() -> Self {
        Self::new(Generation::Invader)
    }
    /// Ventura (SAS3516).
    pub fn ventura() -> Self {
        Self::new(Generation::Ventura)
    }
    /// Aero (SAS39xx).
    pub fn aero() -> Self {
        Self::new(Generation::Aero)
    }
    /// Thunderbolt (SAS2208).
    pub fn thunderbolt() -> Self {
        Self::new(Generation::Thunderbolt)
    }
}

#[derive(Clone, Copy, Debug)]
struct Init {
    frames: u64,
    depth: u32,
    queues: u16,
    vectors: u8,
    sense_hi: u32,
}

#[derive(Clone, Debug)]
enum Work {
    /// Already executed (DCMD): only the reply is left.
    ReplyOnly,
    /// LD command to execute at reply time.
    Ld(LdCmd),
    /// A map sync (LD_MAP_GET_INFO with the pend flag) held until the configuration changes.
    MapSync(HeldSync),
}

/// A held map sync: its MFI frame and data buffer.
#[derive(Clone, Copy, Debug)]
struct HeldSync {
    /// LD_MAP_GET_INFO or SYSTEM_PD_MAP_GET_INFO.
    opcode: u32,
    mfi: u64,
    addr: u64,
    len: usize,
}

#[derive(Clone, Debug)]
struct LdCmd {
    frame: u64,
    target: u16,
    /// FastPath to this arm of the RAID-0 LD; `stale`: its sequence number is not the map's.
    arm: Option<usize>,
    stale: bool,
    /// Addressed to a system PD (FastPath, DevHandle 0xFFFF, target in the RAID context).
    pd: bool,
    kind: LdKind,
    sgl: Vec<(u64, u32)>,
    data_len: u32,
    sense: u64,
    held: bool,
    fail: Option<Failure>,
}

#[derive(Clone, Copy, Debug)]
enum LdKind {
    Read { lba: u64, blocks: u32 },
    Write { lba: u64, blocks: u32 },
    ReadCapacity16,
    ReadCapacity10,
    Inquiry,
    NoData,
    Unsupported,
}

/// An error to return for an LD command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Failure {
    /// RAID-context status (MFI status), e.g. 0x2D.
    pub status: u8,
    /// RAID-context ex_status (SCSI status), e.g. 0x02.
    pub scsi_status: u8,
    /// Sense key, ASC, ASCQ written as fixed-format sense when `scsi_status` is 0x02.
    pub sense: Option<(u8, u8, u8)>,
}

struct Pending {
    smid: u16,
    queue: u16,
    ready_at: u64,
    work: Work,
}

struct Ld {
    target: u8,
    /// A system PD (JBOD disk) rather than an LD.
    pd: bool,
    blocks: u64,
    data: Vec<u8>,
}

struct State {
    cfg: FakeConfig,
    clock: u64,
    state: u8,
    fault_bits: u32,
    transitions: VecDeque<(u64, u8)>,
    handshake_then_boot_msg: bool,
    doorbell_busy_until: u64,
    diag_keys: usize,
    drwe: bool,
    reset_until: Option<u64>,
    dead: bool,
    latched_low: Option<u32>,
    /// Descriptor writes seen: low/high pairs, 8-byte writes, atomic-port writes.
    descriptor_writes: DescriptorWrites,
    init: Option<Init>,
    atomic_ok: bool,
    outstanding: Vec<bool>,
    pending: Vec<Pending>,
    producer: Vec<u32>,
    host_index: Vec<u32>,
    /// Each reply queue's ring base (contiguous or from the RDPQ array).
    rings: Vec<u64>,
    /// The last successful IOC INIT gave an RDPQ array.
    init_rdpq: bool,
    /// The last successful IOC INIT's replyqueue_mask.
    init_coalesce_mask: u16,
    /// Replies posted per reply queue since the last IOC INIT.
    replies_per_queue: Vec<u64>,
    /// Per queue: when each posted, not yet consumed reply was posted.
    posted_at: Vec<VecDeque<u64>>,
    mask: u32,
    intr_status: u32,
    raised: Vec<bool>,
    lds: Vec<Ld>,
    /// The RAID-0 LD's member disks, in arm order.
    arms: Vec<Vec<u8>>,
    /// FastPath requests refused for a stale sequence number.
    stale_refusals: u64,
    /// FastPath requests served.
    fastpath_served: u64,
    /// FastPath requests served by each arm.
    fastpath_by_arm: Vec<u64>,
    /// FastPath writes taken in with the cache-bypass marks (SLD and the CACHE_BYPASS sub-type).
    cache_bypass_writes: u64,
    /// LD-path writes taken in with the LDIO_BW_LIMIT sub-type.
    ldio_bw_limit_writes: u64,
    /// RAID-1 FastPath write halves waiting for their peer, by the peer's SMID.
    r1_expected: alloc::collections::BTreeMap<u16, Raid1Half>,
    /// RAID-1 FastPath write pairs whose two halves both arrived.
    raid1_write_pairs: u64,
    /// The descriptor being taken in is a RAID-1 FastPath write half.
    intake_r1_half: bool,
    /// The next FastPath write to this arm fails with this status.
    fail_arm_write: Option<(usize, Failure)>,
    violations: Vec<(Violation, String)>,
    warnings: Vec<(Violation, String)>,
    fail_next: VecDeque<Failure>,
    fail_next_init: Option<u8>,
    hold_next: u32,
    zero_reads: u32,
    rng: u64,
    replies_posted: u64,
    commands_accepted: u64,
    resets: u64,
    /// SP0 shows READY until this virtual time although IOC INIT succeeded.
    operational_shown_at: u64,
    /// Capability word of the last IOC INIT received.
    init_caps: Option<u32>,
    /// The map sync `dcmd` just decided to hold (taken by `commit`).
    sync_held: Option<HeldSync>,
    /// Map syncs held so far.
    map_syncs_held: u64,
    /// The status the next answered map sync gets (None: the new map, status 0).
    fail_next_map_sync: Option<u8>,
    /// Every system PD's sequence number in the JBOD map.
    jbod_seq: u16,
    /// System-PD requests served by the JBOD map, and refused for a stale sequence number.
    jbod_served: u64,
    jbod_stale: u64,
    /// System-PD requests served by the RAID map's handle.
    jbod_raid_map_served: u64,
}

/// The model. Share it through `Arc`; [`FakeMmio`] and [`FakeDelay`] are the driver's handles.
pub struct FakeFusion {
    st: Mutex<State>,
    mem: Arc<FakeMemory>,
}

/// Register window of the model.
#[derive(Clone)]
pub struct FakeMmio(pub Arc<FakeFusion>);
/// Virtual-clock delay of the model.
#[derive(Clone)]
pub struct FakeDelay(pub Arc<FakeFusion>);

impl Mmio for FakeMmio {
    fn read32(&self, offset: u32) -> u32 {
        self.0.read(offset)
    }
    fn write32(&self, offset: u32, value: u32) {
        self.0.write(offset, value)
    }
}

impl crate::Mmio64 for FakeMmio {
    fn write64(&self, offset: u32, value: u64) {
        self.0.write64(offset, value)
    }
}

impl Delay for FakeDelay {
    fn delay_us(&self, us: u32) {
        self.0.advance(u64::from(us));
    }
}

const ALL_ONES: u64 = u64::MAX;

impl FakeFusion {
    /// A model with its own DMA address space below 4 GiB.
    pub fn new(cfg: FakeConfig) -> Arc<Self> {
        Self::with_memory(cfg, FakeMemory::new(0x1000_0000))
    }

    /// A model over an existing address space.
    pub fn with_memory(cfg: FakeConfig, mem: Arc<FakeMemory>) -> Arc<Self> {
        let (state, fault_bits, transitions) = match cfg.start {
            StartState::PowerOn => {
                let d = cfg.state_delay_us;
                (0x0, 0, VecDeque::from(vec![(d, 0x4), (2 * d, 0x8), (3 * d, 0xB)]))
            }
            StartState::WaitHandshake => (0x6, 0, VecDeque::new()),
            StartState::BootMessagePending => (0x9, 0, VecDeque::new()),
            StartState::Operational => (0xC, 0, VecDeque::new()),
            StartState::Fault { resettable } => (
                0xF,
                (0x0A5 << 16) | (0x12 << 8) | (u32::from(resettable) << 1),
                VecDeque::new(),
            ),
            StartState::Ready => (0xB, 0, VecDeque::new()),
        };
        // Ventura and later: peer SMIDs up to 2 × max_fw_cmds.
        let smids = 2 * usize::from(cfg.raw_cmds);
        let lds = cfg
            .lds
            .iter()
            .map(|&(target, blocks)| Ld {
                target,
                pd: false,
                blocks,
                data: vec![0u8; (blocks * u64::from(cfg.block_size)) as usize],
            })
            .chain(cfg.system_pds.iter().map(|&(id, blocks)| Ld {
                target: id as u8,
                pd: true,
                blocks,
                data: vec![0u8; (blocks * u64::from(cfg.block_size)) as usize],
            }))
            .collect();
        let mut lds: Vec<Ld> = lds;
        let mut arms = Vec::new();
        if let Some(r) = &cfg.raid0 {
            // The LD's blocks live on the arms; its entry only gives the list and capacity.
            lds.push(Ld {
                target: r.target,
                pd: false,
                blocks: r.blocks(),
                data: Vec::new(),
            });
            let arm_bytes = ((r.rows << r.strip_shift) * u64::from(cfg.block_size)) as usize;
            arms = r.pds.iter().map(|_| vec![0u8; arm_bytes]).collect();
        }
        let fastpath_by_arm = vec![0; arms.len()];
        let rng = cfg.seed | 1;
        let busy_at_start = cfg.doorbell_busy_at_start_us;
        Arc::new(Self {
            st: Mutex::new(State {
                handshake_then_boot_msg: cfg.start == StartState::WaitHandshake,
                cfg,
                clock: 0,
                state,
                fault_bits,
                transitions,
                doorbell_busy_until: busy_at_start,
                diag_keys: 0,
                drwe: false,
                reset_until: None,
                dead: false,
                latched_low: None,
                descriptor_writes: DescriptorWrites::default(),
                init: None,
                atomic_ok: false,
                outstanding: vec![false; smids + 1],
                pending: Vec::new(),
                producer: Vec::new(),
                host_index: Vec::new(),
                rings: Vec::new(),
                init_rdpq: false,
                init_coalesce_mask: 0,
                replies_per_queue: Vec::new(),
                posted_at: Vec::new(),
                mask: 0xFFFF_FFFF,
                intr_status: 0,
                raised: Vec::new(),
                lds,
                arms,
                stale_refusals: 0,
                fastpath_served: 0,
                fastpath_by_arm,
                cache_bypass_writes: 0,
                ldio_bw_limit_writes: 0,
                violations: Vec::new(),
                warnings: Vec::new(),
                fail_next: VecDeque::new(),
                fail_next_init: None,
                hold_next: 0,
                zero_reads: 0,
                rng,
                replies_posted: 0,
                commands_accepted: 0,
                resets: 0,
                operational_shown_at: 0,
                init_caps: None,
                sync_held: None,
                map_syncs_held: 0,
                fail_next_map_sync: None,
                jbod_seq: JBOD_SEQ_FIRST,
                jbod_served: 0,
                jbod_stale: 0,
                jbod_raid_map_served: 0,
                r1_expected: alloc::collections::BTreeMap::new(),
                raid1_write_pairs: 0,
                intake_r1_half: false,
                fail_arm_write: None,
            }),
            mem,
        })
    }

    /// The DMA address space (allocate driver memory and test buffers from it).
    pub fn memory(&self) -> &Arc<FakeMemory> {
        &self.mem
    }
    /// A [`devhal::Dma`] allocator over the model's memory.
    pub fn dma(&self) -> FakeDma {
        self.mem.dma()
    }
    /// Register handle.
    pub fn mmio(self: &Arc<Self>) -> FakeMmio {
        FakeMmio(Arc::clone(self))
    }
    /// Delay handle.
    pub fn delay(self: &Arc<Self>) -> FakeDelay {
        FakeDelay(Arc::clone(self))
    }

    /// Protocol violations so far, with details.
    pub fn violations(&self) -> Vec<(Violation, String)> {
        self.st.lock().violations.clone()
    }
    /// Whether `v` was recorded.
    pub fn has(&self, v: Violation) -> bool {
        let s = self.st.lock();
        s.violations.iter().chain(s.warnings.iter()).any(|(x, _)| *x == v)
    }
    /// Warnings (DCMD off queue 0, unknown capability bits, RDPQ).
    pub fn warnings(&self) -> Vec<(Violation, String)> {
        self.st.lock().warnings.clone()
    }
    /// Stray DMA recorded by the address space.
    pub fn dma_violations(&self) -> Vec<String> {
        self.mem.violations()
    }
    /// Checks that every posted reply was consumed (call when the driver should be idle).
    pub fn audit(&self) {
        let mut s = self.st.lock();
        for q in 0..s.producer.len() {
            if s.producer[q] != s.host_index[q] {
                let d = format!("queue {q}: producer {} host index {}", s.producer[q], s.host_index[q]);
                s.violate(Violation::RepliesNotConsumed, d);
            }
        }
    }
    /// Virtual time.
    pub fn now_us(&self) -> u64 {
        self.st.lock().clock
    }
    /// Current SP0 state nibble.
    pub fn fw_state(&self) -> u8 {
        self.st.lock().state
    }
    /// After a successful IOC INIT: whether it gave an RDPQ array, each reply queue's ring base
    /// and the depth.
    pub fn reply_rings(&self) -> Option<(bool, Vec<u64>, u32)> {
        let s = self.st.lock();
        s.init.map(|i| (s.init_rdpq, s.rings.clone(), i.depth))
    }
    /// After a successful IOC INIT: its replyqueue_mask (the coalesced groups of 8 queues) and
    /// the replies posted on each reply queue since.
    pub fn coalescing(&self) -> (u16, Vec<u64>) {
        let s = self.st.lock();
        (s.init_coalesce_mask, s.replies_per_queue.clone())
    }
    /// The request descriptor writes seen so far, by form.
    pub fn descriptor_writes(&self) -> DescriptorWrites {
        self.st.lock().descriptor_writes
    }
    /// Commands accepted, replies posted, resets.
    pub fn counts(&self) -> (u64, u64, u64) {
        let s = self.st.lock();
        (s.commands_accepted, s.replies_posted, s.resets)
    }
    /// Commands accepted and not yet replied to.
    pub fn in_flight(&self) -> usize {
        self.st.lock().pending.len()
    }

    /// Advances the virtual clock, running state transitions and posting due replies.
    pub fn advance(&self, us: u64) {
        let mut s = self.st.lock();
        s.clock += us;
        s.tick(&self.mem);
    }

    /// Vectors with a reply interrupt pending and not masked (cleared by this call).
    pub fn take_vectors(&self) -> Vec<u16> {
        let mut s = self.st.lock();
        if s.mask & 0x8 != 0 {
            return Vec::new();
        }
        let mut out = Vec::new();
        for (i, r) in s.raised.iter_mut().enumerate() {
            if core::mem::take(r) {
                out.push(i as u16);
            }
        }
        out
    }
    /// Whether the INTx line is asserted.
    pub fn intx_asserted(&self) -> bool {
        let s = self.st.lock();
        s.intr_status & !s.mask & 0x9 != 0
    }

    // ----- injection -----

    /// The next LD command completes with this failure.
    pub fn fail_next_io(&self, f: Failure) {
        self.st.lock().fail_next.push_back(f);
    }
    /// The next IOC INIT fails with this status.
    pub fn fail_next_init(&self, status: u8) {
        self.st.lock().fail_next_init = Some(status);
    }
    /// The capability word (MFI frame offset 4) of the last IOC INIT, if any arrived.
    pub fn init_capabilities(&self) -> Option<u32> {
        self.st.lock().init_caps
    }
    /// From now on LD commands complete after a delay drawn from `lo..=hi` virtual µs.
    pub fn set_io_delay_us(&self, lo: u64, hi: u64) {
        self.st.lock().cfg.io_delay_us = (lo, hi.max(lo));
    }
    /// The next `n` LD read/write commands are accepted but never complete (until a reset).
    pub fn hold_next_io(&self, n: u32) {
        self.st.lock().hold_next = n;
    }
    /// Spontaneous FAULT: every command is dropped (never completes).
    pub fn inject_fault(&self, code: u16, sub: u8, resettable: bool) {
        let mut s = self.st.lock();
        s.state = 0xF;
        s.fault_bits = (u32::from(code & 0xFFF) << 16) | (u32::from(sub) << 8) | (u32::from(resettable) << 1);
        // The fault strikes whenever the firmware likes, also between a CPU's 0xC0 and 0xC4
        // writes. The host interface keeps the latched low dword; the commit that follows is
        // dropped because the firmware is in FAULT. Forgetting the latch here would call that
        // (correctly locked) 0xC4 a driver error: the flake of `threads_with_faults_*`.
        let latched = s.latched_low;
        s.forget_commands();
        s.latched_low = latched;
        s.intr_status |= 0x1;
    }
    /// The next `n` register reads return 0 (Aero glitch).
    pub fn zero_reads(&self, n: u32) {
        self.st.lock().zero_reads = n;
    }
    /// A hostile device: posts a reply for `smid` on `queue` that no command asked for.
    pub fn inject_bogus_reply(&self, queue: u16, smid: u16) {
        let mut s = self.st.lock();
        let p = Pending {
            smid,
            queue,
            ready_at: 0,
            work: Work::ReplyOnly,
        };
        if usize::from(smid) < s.outstanding.len() {
            s.post(&self.mem, p);
        } else if let Some(init) = s.init {
            // Out of the SMID range: store the descriptor by hand.
            let q = usize::from(queue);
            let slot = s.rings[q] + 8 * u64::from(s.producer[q]);
            self.mem
                .write_u64("bogus reply", slot, u64::from(queue as u8) << 8 | u64::from(smid) << 16);
            s.producer[q] = (s.producer[q] + 1) % init.depth;
            let now = s.clock;
            s.posted_at[q].push_back(now);
            s.raised[q] = true;
        }
    }

    /// Reads LD `target`'s backing store (the RAID-0 LD's as its arms hold it).
    pub fn ld_bytes(&self, target: u8, off: usize, len: usize) -> Vec<u8> {
        let raid = {
            let s = self.st.lock();
            s.cfg
                .raid0
                .as_ref()
                .filter(|r| r.target == target)
                .map(|_| s.cfg.block_size as usize)
        };
        if let Some(bs) = raid {
            let first = off / bs;
            let blocks = (off + len).div_ceil(bs) - first;
            let bytes = self.raid0_bytes(first as u64, blocks as u64);
            return bytes[off - first * bs..off - first * bs + len].to_vec();
        }
        let s = self.st.lock();
        let ld = s.lds.iter().find(|l| l.target == target && !l.pd).expect("no such LD");
        ld.data[off..off + len].to_vec()
    }
    /// Reads system PD `device`'s backing store.
    pub fn pd_bytes(&self, device: u8, off: usize, len: usize) -> Vec<u8> {
        let s = self.st.lock();
        let pd = s.lds.iter().find(|l| l.target == device && l.pd).expect("no such PD");
        pd.data[off..off + len].to_vec()
    }
    /// Reads the RAID-0 LD's blocks as the firmware stripes them over its arms.
    pub fn raid0_bytes(&self, lba: u64, blocks: u64) -> Vec<u8> {
        let s = self.st.lock();
        let r = s.cfg.raid0.as_ref().expect("no RAID-0 LD");
        let bs = u64::from(s.cfg.block_size);
        let mut out = Vec::new();
        for b in lba..lba + blocks {
            let (arm, pd_lba) = r.place(b);
            let at = (pd_lba * bs) as usize;
            out.extend_from_slice(&s.arms[arm][at..at + bs as usize]);
        }
        out
    }
    /// Reads arm `arm`'s disk of the RAID-0 LD.
    pub fn arm_bytes(&self, arm: usize, off: usize, len: usize) -> Vec<u8> {
        let s = self.st.lock();
        s.arms[arm][off..off + len].to_vec()
    }
    /// (FastPath requests served, FastPath requests refused for a stale sequence number).
    pub fn fastpath_counts(&self) -> (u64, u64) {
        let s = self.st.lock();
        (s.fastpath_served, s.stale_refusals)
    }
    /// FastPath requests served by each arm of the RAID LD.
    pub fn fastpath_by_arm(&self) -> Vec<u64> {
        self.st.lock().fastpath_by_arm.clone()
    }
    /// FastPath writes (RAID-1 halves each) taken in marked as bypassing the controller cache.
    pub fn cache_bypass_writes(&self) -> u64 {
        self.st.lock().cache_bypass_writes
    }
    /// LD-path writes taken in marked LDIO_BW_LIMIT (large RAID-1 writes of a
    /// PCIe-bandwidth-limited controller).
    pub fn ldio_bw_limit_writes(&self) -> u64 {
        self.st.lock().ldio_bw_limit_writes
    }
    /// RAID-1 FastPath write pairs whose two halves both arrived.
    pub fn raid1_write_pairs(&self) -> u64 {
        self.st.lock().raid1_write_pairs
    }
    /// RAID-1 FastPath write halves still waiting for their peer.
    pub fn raid1_halves_waiting(&self) -> usize {
        self.st.lock().r1_expected.len()
    }
    /// The next FastPath write to arm `arm` of the RAID LD completes with `f` (one arm of a
    /// RAID-1 write pair failing).
    pub fn fail_next_write_on_arm(&self, arm: usize, f: Failure) {
        self.st.lock().fail_arm_write = Some((arm, f));
    }
    /// A configuration change: the RAID-0 LD's sequence number moves on, so a FastPath request
    /// routed with the old map is refused (status 0x67), and a held map sync is answered: the
    /// new map written into its buffer (or the status [`FakeFusion::fail_next_map_sync`] set)
    /// and its reply posted.
    pub fn change_raid_config(&self) {
        let mut s = self.st.lock();
        if let Some(r) = s.cfg.raid0.as_mut() {
            r.seq = r.seq.wrapping_add(1);
        }
        if s.cfg.jbod_map {
            s.jbod_seq = s.jbod_seq.wrapping_add(1);
        }
        let mem = Arc::clone(&self.mem);
        let clock = s.clock;
        let held: Vec<usize> = (0..s.pending.len())
            .filter(|&i| matches!(s.pending[i].work, Work::MapSync(_)))
            .collect();
        for i in held {
            let Work::MapSync(h) = s.pending[i].work else {
                continue;
            };
            let status = match s.fail_next_map_sync.take() {
                Some(st) => st,
                None => s.dcmd(&mem, h.opcode, &[0u8; 12], h.addr, h.len),
            };
            mem.write("MFI cmd_status", h.mfi + 2, &[status]);
            s.pending[i].work = Work::ReplyOnly;
            s.pending[i].ready_at = clock;
        }
    }

    /// System-PD requests served by the JBOD map, and refused for a stale sequence number.
    pub fn jbod_map_counts(&self) -> (u64, u64) {
        let s = self.st.lock();
        (s.jbod_served, s.jbod_stale)
    }

    /// System-PD requests served by the RAID map's device handle.
    pub fn jbod_raid_map_served(&self) -> u64 {
        self.st.lock().jbod_raid_map_served
    }

    /// Whether a map sync is held (pended, waiting for a configuration change).
    pub fn map_sync_held(&self) -> bool {
        self.st
            .lock()
            .pending
            .iter()
            .any(|p| matches!(p.work, Work::MapSync(_)))
    }

    /// Map syncs held so far (each pended one the model kept).
    pub fn map_syncs_held(&self) -> u64 {
        self.st.lock().map_syncs_held
    }

    /// The next map sync answered by a configuration change completes with MFI status
    /// `status` and no map.
    pub fn fail_next_map_sync(&self, status: u8) {
        self.st.lock().fail_next_map_sync = Some(status);
    }

    /// Bytes written over the RAID map from now on (the next map sync's answer included).
    pub fn damage_raid_map(&self, at: usize, bytes: &[u8]) {
        if let Some(r) = self.st.lock().cfg.raid0.as_mut() {
            r.damage = Some((at, bytes.to_vec()));
        }
    }

    /// Writes LD `target`'s backing store.
    pub fn set_ld_bytes(&self, target: u8, off: usize, data: &[u8]) {
        let mut s = self.st.lock();
        let ld = s
            .lds
            .iter_mut()
            .find(|l| l.target == target && !l.pd)
            .expect("no such LD");
        ld.data[off..off + data.len()].copy_from_slice(data);
    }

    fn read(&self, off: u32) -> u32 {
        let mut s = self.st.lock();
        s.tick(&self.mem);
        if s.zero_reads > 0 && s.cfg.generation == Generation::Aero {
            s.zero_reads -= 1;
            return 0;
        }
        match off {
            0x000 => u32::from(s.clock < s.doorbell_busy_until),
            0x008 => (u32::from(s.drwe) << 7) | (u32::from(s.reset_until.is_some()) << 2),
            0x030 => s.intr_status,
            0x034 => s.mask,
            0x0B0 => s.sp0(),
            0x0B4 => s.sp1(),
            0x0B8 => {
                if s.cfg.generation >= Generation::Ventura {
                    u32::from(s.cfg.raid_map_units) << 16
                } else {
                    u32::from(s.cfg.raw_cmds)
                }
            }
            0x0BC if s.cfg.generation >= Generation::Ventura => 12,
            _ => 0,
        }
    }

    /// An 8-byte register write: at 0xC0 it commits a whole request descriptor at once
    /// (Linux's `writeq` of the descriptor); anywhere else it is a driver error.
    fn write64(&self, off: u32, v: u64) {
        let mut s = self.st.lock();
        s.tick(&self.mem);
        if off != 0x0C0 {
            s.violate(Violation::WideWrite, format!("8-byte write at {off:#x}: {v:#x}"));
            return;
        }
        if s.latched_low.is_some() {
            // Another post's low dword is waiting for its high one: the two forms mixed.
            s.violate(
                Violation::LowTwice,
                format!("0xC0 written as 8 bytes after a 4-byte low ({v:#x})"),
            );
        }
        s.descriptor_writes.wide += 1;
        s.commit(&self.mem, v, false);
    }

    fn write(&self, off: u32, v: u32) {
        let mut s = self.st.lock();
        s.tick(&self.mem);
        match off {
            0x000 => s.doorbell(v),
            0x004 => {
                const KEYS: [u32; 7] = [0x0, 0xF, 0x4, 0xB, 0x2, 0x7, 0xD];
                if v == KEYS[0] {
                    s.diag_keys = 1;
                } else if s.diag_keys < 7 && v == KEYS[s.diag_keys] {
                    s.diag_keys += 1;
                } else {
                    s.diag_keys = 0;
                }
                if s.diag_keys == 7 {
                    s.drwe = true;
                }
            }
            0x008 if s.drwe && v & 0x4 != 0 && !s.dead => s.adapter_reset(),
            0x030 => s.intr_status &= !v,
            0x034 => s.mask = v,
            0x06C => {
                if s.combined() {
                    s.violate(
                        Violation::HostIndexWrongRegister,
                        format!("0x6C written in combined mode: {v:#x}"),
                    );
                } else {
                    let q = (v >> 24) as usize;
                    s.host_index_write(&self.mem, q, v & 0x00FF_FFFF);
                }
            }
            o if (0x30C..0x30C + 16 * 0x10).contains(&o) && (o - 0x30C) % 0x10 == 0 => {
                if !s.combined() {
                    s.violate(
                        Violation::HostIndexWrongRegister,
                        format!("{o:#x} written outside combined mode"),
                    );
                } else {
                    let q = ((o - 0x30C) / 0x10 * 8 + ((v >> 24) & 7)) as usize;
                    s.host_index_write(&self.mem, q, v & 0x00FF_FFFF);
                }
            }
            0x0C0 => {
                if s.latched_low.is_some() {
                    s.violate(Violation::LowTwice, format!("0xC0 written twice ({v:#x})"));
                }
                s.latched_low = Some(v);
            }
            0x0C4 => match s.latched_low.take() {
                Some(lo) => {
                    s.descriptor_writes.pairs += 1;
                    s.commit(&self.mem, (u64::from(v) << 32) | u64::from(lo), false)
                }
                None => s.violate(Violation::HighWithoutFreshLow, format!("0xC4 {v:#x} without 0xC0")),
            },
            0x0C8 => {
                if !s.atomic_ok {
                    s.violate(Violation::AtomicPortNotAllowed, format!("0xC8 {v:#x}"));
                    if s.state == 0xB && v & 0x0E == 0x02 {
                        s.violate(Violation::IocInitViaAtomicPort, String::new());
                    }
                } else {
                    s.descriptor_writes.atomic += 1;
                    s.commit(&self.mem, u64::from(v), true);
                }
            }
            _ => {}
        }
    }
}

impl State {
    fn violate(&mut self, v: Violation, detail: String) {
        log::debug!("fake fusion: violation {v:?}: {detail}");
        self.violations.push((v, detail));
    }

    fn warn(&mut self, v: Violation, detail: String) {
        self.warnings.push((v, detail));
    }

    fn rand(&mut self) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }

    fn max_fw_cmds(&self) -> u16 {
        self.cfg.raw_cmds - 1
    }

    fn max_num_sge(&self) -> usize {
        let unit = if self.cfg.chain_512 { 512 } else { 128 };
        let chain = (u32::from(self.cfg.chain_units) * unit).max(1024);
        let v = 6 + chain / 16;
        (1u32 << (31 - v.leading_zeros())) as usize
    }

    /// Combined mode follows the *firmware's* queue count, as Linux and FreeBSD decide it:
    /// more than 8 (Invader) or 16 (Ventura/Aero) MSI-X queues in SP1.
    fn combined(&self) -> bool {
        self.cfg
            .generation
            .combined_above()
            .is_some_and(|c| self.cfg.msix_capable && self.cfg.fw_queues > c)
    }

    fn sp0(&self) -> u32 {
        let shown = if self.state == 0xC && self.clock < self.operational_shown_at {
            0xB
        } else {
            self.state
        };
        let st = u32::from(shown) << 28;
        if self.state == 0xF {
            st | self.fault_bits
        } else {
            st | (u32::from(self.cfg.msix_capable) << 26) | u32::from(self.cfg.raw_cmds)
        }
    }

    fn sp1(&self) -> u32 {
        let c = &self.cfg;
        let q = u32::from(c.fw_queues.max(1) - 1);
        let qfield = if c.generation == Generation::Thunderbolt {
            q & 0x1F
        } else {
            (q & 0xFF) << 14
        };
        qfield
            | (u32::from(c.chain_units & 0x1F) << 5)
            | (u32::from(c.chain_512) << 22)
            | (u32::from(c.rdpq) << 23)
            | (u32::from(c.bit24) << 24)
            | (u32::from(c.ctrl64) << 25)
            | (u32::from(c.coalescing) << 26)
    }

    fn tick(&mut self, mem: &FakeMemory) {
        while let Some(&(at, st)) = self.transitions.front() {
            if at > self.clock {
                break;
            }
            self.transitions.pop_front();
            self.state = st;
            if st == 0x4 || (st == 0xF && self.reset_until.is_some()) {
                self.reset_until = None;
            }
        }
        if self.state != 0xC || self.pending.is_empty() {
            return;
        }
        let mut i = 0;
        while i < self.pending.len() {
            let p = &self.pending[i];
            let hold = matches!(&p.work, Work::Ld(c) if c.held) || matches!(p.work, Work::MapSync(_));
            if p.ready_at <= self.clock && !hold {
                let p = self.pending.swap_remove(i);
                if !self.post(mem, p) {
                    break;
                }
            } else {
                i += 1;
            }
        }
    }

    fn forget_commands(&mut self) {
        self.pending.clear();
        self.outstanding.iter_mut().for_each(|o| *o = false);
        self.r1_expected.clear();
        self.init = None;
        self.atomic_ok = false;
        self.latched_low = None;
        self.producer.clear();
        self.host_index.clear();
        self.posted_at.clear();
        self.raised.clear();
    }

    fn adapter_reset(&mut self) {
        // A driver drains its queues before a reset; a reply left for 100 ms was never seen.
        let stale = self.clock.saturating_sub(100_000);
        for q in 0..self.posted_at.len() {
            if self.posted_at[q].front().is_some_and(|&t| t < stale) {
                let d = format!(
                    "queue {q}: {} replies never consumed before the reset",
                    self.posted_at[q].len()
                );
                self.violate(Violation::RepliesNotConsumed, d);
            }
        }
        self.forget_commands();
        self.resets += 1;
        self.drwe = false;
        self.diag_keys = 0;
        self.fault_bits = 0;
        self.state = 0x1;
        let t = self.clock;
        let f = self.cfg.fault_while_restarting_us;
        let ready = self.cfg.reset_to_ready_us.max(200_001);
        self.reset_until = Some(t + 200_000);
        self.transitions = if f > 0 {
            VecDeque::from(vec![(t + 200_000, 0xF), (t + 200_000 + f, 0x4), (t + ready + f, 0xB)])
        } else {
            VecDeque::from(vec![(t + 200_000, 0x4), (t + ready, 0xB)])
        };
    }

    fn doorbell(&mut self, v: u32) {
        // Linux and FreeBSD write the handshake doorbells without polling bit 0;
        // only IOC INIT must wait for it (checked at its post).
        self.doorbell_busy_until = self.clock + self.cfg.doorbell_busy_us;
        let t = self.clock;
        let d = self.cfg.state_delay_us;
        match (v, self.state) {
            (0x20, _) => {
                self.forget_commands();
                self.dead = true;
                self.state = 0xF;
                self.fault_bits = 0;
            }
            (0x07, 0xC) => {
                self.forget_commands();
                self.transitions = VecDeque::from(vec![(t + 100, 0xB)]);
            }
            (0x18, 0x6) => {
                self.transitions = if self.handshake_then_boot_msg {
                    VecDeque::from(vec![(t + 100, 0x9)])
                } else {
                    VecDeque::from(vec![(t + d, 0x4), (t + 2 * d, 0xB)])
                };
            }
            (0x10, 0x9) => self.transitions = VecDeque::from(vec![(t + d, 0x4), (t + 2 * d, 0xB)]),
            _ => self.violate(
                Violation::DoorbellWrongState,
                format!("doorbell {v:#x} in state {:#x}", self.state),
            ),
        }
    }

    fn host_index_write(&mut self, mem: &FakeMemory, q: usize, idx: u32) {
        let Some(init) = self.init else {
            return;
        };
        if q >= usize::from(init.queues) {
            self.violate(Violation::HostIndexWrongQueue, format!("queue {q} of {}", init.queues));
            return;
        }
        if idx >= init.depth {
            self.violate(
                Violation::HostIndexBeyondDepth,
                format!("queue {q} index {idx} depth {}", init.depth),
            );
            return;
        }
        let d = init.depth;
        let old = self.host_index[q];
        let ahead = (self.producer[q] + d - old) % d;
        let moved = (idx + d - old) % d;
        if moved > ahead {
            self.violate(
                Violation::HostIndexBeyondProducer,
                format!(
                    "queue {q} index {idx}, consumer was {old}, producer {}",
                    self.producer[q]
                ),
            );
            return;
        }
        // The driver restores every slot it consumed to all-ones before moving the index past it.
        let mut i = old;
        while i != idx {
            let slot = self.rings[q] + 8 * u64::from(i);
            // One atomic load: the driver restores a slot with one 64-bit store.
            if mem.load_u64_atomic(slot) != Some(ALL_ONES) {
                self.violate(
                    Violation::HostIndexSkipsReplies,
                    format!("queue {q}: index moved {old} -> {idx} past unconsumed slot {i}"),
                );
                break;
            }
            i = (i + 1) % d;
        }
        self.host_index[q] = idx;
        for _ in 0..moved {
            self.posted_at[q].pop_front();
        }
        // Replies held back by a full queue can go now.
        self.tick(mem);
    }

    fn commit(&mut self, mem: &FakeMemory, d: u64, atomic: bool) {
        let flags = d as u8;
        let msix = (d >> 8) as u8;
        let smid = (d >> 16) as u16;
        if self.dead || self.state == 0xF {
            return;
        }
        if flags & 0x0F == 0x02 {
            // MFA: IOC INIT.
            if flags != 0x02 {
                self.violate(Violation::InitFrameMisaligned, format!("MFA flags byte {flags:#x}"));
                return;
            }
            if atomic {
                self.violate(Violation::IocInitViaAtomicPort, String::new());
                return;
            }
            match self.state {
                0xC => self.violate(Violation::IocInitTwice, String::new()),
                0xB if self.clock < self.doorbell_busy_until => self.violate(
                    Violation::DoorbellWhileBusy,
                    String::from("IOC INIT posted while doorbell bit 0 is set"),
                ),
                0xB => self.ioc_init(mem, d & !0xFF),
                s => self.violate(Violation::PostNotOperational, format!("IOC INIT in state {s:#x}")),
            }
            return;
        }
        let Some(init) = self.init.filter(|_| self.state == 0xC) else {
            self.violate(
                Violation::PostNotOperational,
                format!("descriptor {d:#x} in state {:#x}", self.state),
            );
            return;
        };
        let peer_smids = if self.cfg.generation.g35_raid_context() { 2 } else { 1 };
        if smid == 0 || smid > peer_smids * self.max_fw_cmds() {
            self.violate(Violation::BadSmid, format!("SMID {smid}"));
            return;
        }
        if self.outstanding[usize::from(smid)] {
            self.violate(Violation::SmidOutstanding, format!("SMID {smid}"));
            return;
        }
        if (init.vectors == 0 && msix != 0) || (init.vectors > 0 && msix >= init.vectors) {
            self.violate(
                Violation::BadMsixIndex,
                format!("MSIxIndex {msix} with {} vectors", init.vectors),
            );
            return;
        }
        let frame_addr = init.frames + 256 * u64::from(smid);
        let mut frame = [0u8; 256];
        if !mem.read("request frame", frame_addr, &mut frame) {
            return;
        }
        let function = frame[3];
        self.intake_r1_half = false;
        let work = self.take_in(mem, smid, flags, function, &frame, frame_addr, init, d, atomic);
        if !self.intake_r1_half {
            if let Some(h) = self.r1_expected.remove(&smid) {
                self.violate(
                    Violation::Raid1PairMalformed,
                    format!("SMID {smid}, SMID {}'s peer, came as Function {function:#x}", h.smid),
                );
            }
            if smid > self.max_fw_cmds() {
                self.violate(
                    Violation::PeerSmidMisused,
                    format!("SMID {smid} Function {function:#x}"),
                );
            }
        }
        let Some(work) = work else {
            return;
        };
        let delay = match &work {
            Work::ReplyOnly | Work::MapSync(_) => self.cfg.dcmd_reply_delay_us,
            Work::Ld(_) => {
                let (lo, hi) = self.cfg.io_delay_us;
                lo + self.rand() % (hi - lo + 1)
            }
        };
        self.outstanding[usize::from(smid)] = true;
        self.commands_accepted += 1;
        let ready_at = self.clock + delay;
        self.pending.push(Pending {
            smid,
            queue: u16::from(msix),
            ready_at,
            work,
        });
    }

    /// The work a posted request asks for; None when it was refused (a violation recorded).
    #[allow(clippy::too_many_arguments)]
    fn take_in(
        &mut self,
        mem: &FakeMemory,
        smid: u16,
        flags: u8,
        function: u8,
        frame: &[u8; 256],
        frame_addr: u64,
        init: Init,
        d: u64,
        atomic: bool,
    ) -> Option<Work> {
        let msix = (d >> 8) as u8;
        let frame = *frame;
        let work = match (flags, function) {
            (0x00, 0xF0) => {
                if msix != 0 {
                    self.warn(Violation::DcmdOffQueue0, format!("DCMD SMID {smid} on queue {msix}"));
                }
                match self.passthrough(mem, &frame) {
                    Some(()) => match self.sync_held.take() {
                        Some(h) => Work::MapSync(h),
                        None => Work::ReplyOnly,
                    },
                    None => return None,
                }
            }
            (0x04 | 0x0E | 0x00, 0xF1) => {
                if self.cfg.generation.g35_raid_context() && frame[0x60 + 0x18] >> 4 == LDIO_BW_LIMIT {
                    let mirror_ld = self
                        .cfg
                        .raid0
                        .as_ref()
                        .is_some_and(|r| r.mirror && le_u16(&frame, 0) == u16::from(r.target));
                    let len = le_u32(&frame, 0x1C);
                    let write = matches!(frame[0x40], 0x0A | 0x2A | 0xAA | 0x8A);
                    if !(mirror_ld && write && len > LARGE_IO_BYTES && self.cfg.pcie_bw_limited) {
                        self.violate(
                            Violation::LdioBwLimitMisused,
                            format!(
                                "SMID {smid}: CDB {:#x} of {len} bytes to target {} (PCIe bandwidth limited: {})",
                                frame[0x40],
                                le_u16(&frame, 0),
                                self.cfg.pcie_bw_limited
                            ),
                        );
                        return None;
                    }
                    self.ldio_bw_limit_writes += 1;
                }
                match self.ld_command(mem, frame_addr, &frame, flags, init, false) {
                    Some(c) => Work::Ld(c),
                    None => return None,
                }
            }
            // A system PD without a RAID map, as Linux `megasas_build_syspd_fusion` sends it:
            // FastPath SCSI IO, DevHandle 0xFFFF, raid_flags sub-type SYSTEM_PD, the device id
            // in the RAID context; IoFlags FastPath bit on Invader and later.
            (0x0C, 0x00) if le_u16(&frame, 0) == 0xFFFF && frame[0x60 + 0x18] == 0x10 => {
                let fp = le_u16(&frame, 0x24) & 0x4000 != 0;
                if fp != (self.cfg.generation != Generation::Thunderbolt) {
                    self.violate(
                        Violation::BadSystemPdRequest,
                        format!("SMID {smid}: IoFlags {:#x}", le_u16(&frame, 0x24)),
                    );
                    return None;
                }
                match self.ld_command(mem, frame_addr, &frame, flags, init, true) {
                    Some(c) => Work::Ld(c),
                    None => return None,
                }
            }
            // A system PD by the JBOD sequence map (Linux with `use_seqnum_jbod_fp`): its
            // device handle, the device id + 255 and the map's sequence number in the RAID
            // context.
            (0x0C, 0x00) if le_u16(&frame, 0) != 0xFFFF && frame[0x60 + 0x18] == 0x10 => {
                // The atomic port's 32-bit descriptor carries no handle.
                let desc_handle = (!atomic).then_some((d >> 48) as u16);
                match self.jbod_command(mem, frame_addr, &frame, flags, init, desc_handle) {
                    Some(c) => Work::Ld(c),
                    None => return None,
                }
            }
            (0x0C, 0x00) if le_u16(&frame, 0) != 0xFFFF && self.cfg.raid0.is_some() => {
                match self.fastpath_command(mem, smid, frame_addr, &frame, flags, init, d, atomic) {
                    Some(c) => Work::Ld(c),
                    None => return None,
                }
            }
            (0x06, 0x01) => Work::ReplyOnly,
            (0x0C, _) => {
                self.violate(Violation::FastPathWithoutMap, format!("SMID {smid}"));
                return None;
            }
            (_, f) if !matches!(f, 0xF0 | 0xF1 | 0x01) => {
                self.violate(Violation::BadFunction, format!("SMID {smid} Function {f:#x}"));
                return None;
            }
            _ => {
                self.violate(
                    Violation::DescriptorFunctionMismatch,
                    format!("descriptor {flags:#x} with Function {function:#x}"),
                );
                return None;
            }
        };
        Some(work)
    }

    /// A FastPath request to a RAID-0 member: the handle must be a member's (and the
    /// descriptor's, unless the atomic port carried it), the request a read or write with the
    /// FastPath bit, the LD's target and the arm's span/arm byte. A stale sequence number is no
    /// mistake (the configuration may change under the driver): it is answered with 0x67.
    #[allow(clippy::too_many_arguments)]
    fn fastpath_command(
        &mut self,
        mem: &FakeMemory,
        smid: u16,
        frame_addr: u64,
        f: &[u8; 256],
        flags: u8,
        init: Init,
        d: u64,
        atomic: bool,
    ) -> Option<LdCmd> {
        let r = self.cfg.raid0.clone()?;
        let handle = le_u16(f, 0);
        if !atomic && (d >> 48) as u16 != handle {
            self.violate(
                Violation::FastPathBadHandle,
                format!("descriptor DevHandle {:#x}, frame {handle:#x}", (d >> 48) as u16),
            );
            return None;
        }
        let Some(arm) = r.pds.iter().position(|&pd| 0x100 + pd == handle) else {
            self.violate(Violation::FastPathBadHandle, format!("handle {handle:#x} is in no map"));
            return None;
        };
        let io_flags = le_u16(f, 0x24);
        let target = le_u16(f, 0x66);
        let g35 = self.cfg.generation >= Generation::Ventura;
        // G35: span/arm at 0x19; Invader: at 0x1C, with type CUDA/nseg 1 and the FastPath lock
        // flags (GRANT_DESTINATION_CUDA | SEQ_NUM_ENABLE) Linux gives it.
        let span_arm = if g35 { f[0x60 + 0x19] } else { f[0x60 + 0x1C] };
        if !g35 && (f[0x60] != 0x12 || f[0x60 + 0x04] != 0x88) {
            self.violate(
                Violation::FastPathBadRequest,
                format!(
                    "Invader RAID context type/nseg {:#x}, reg_lock_flags {:#x}",
                    f[0x60],
                    f[0x60 + 0x04]
                ),
            );
            return None;
        }
        let rw = matches!(f[0x40], 0x28 | 0x2A | 0x88 | 0x8A | 0xA8 | 0xAA | 0x08 | 0x0A);
        let write = matches!(f[0x40], 0x2A | 0x8A | 0xAA | 0x0A);
        let mirror_write = r.mirror && write;
        if io_flags & 0x4000 == 0
            || target != u16::from(r.target)
            || usize::from(span_arm) != arm
            || !rw
            || (mirror_write && r.caps & CAP_FP_WRITE == 0)
        {
            self.violate(
                Violation::FastPathBadRequest,
                format!(
                    "IoFlags {io_flags:#x}, target {target}, span/arm {span_arm:#x} (arm {arm}), CDB {:#x}",
                    f[0x40]
                ),
            );
            return None;
        }
        // Cache bypass is marked in the G35 RAID context only.
        let bypass = g35 && write && r.caps & CAP_FP_CACHE_BYPASS != 0;
        let routing = if g35 { le_u16(f, 0x60 + 0x04) } else { 0 };
        let sub_type = f[0x60 + 0x18] >> 4;
        if (routing & 0x2 != 0, sub_type) != (bypass, if bypass { 6 } else { 0 }) {
            self.violate(
                Violation::CacheBypassFlags,
                format!(
                    "{} with routing flags {routing:#x}, raid_flags sub-type {sub_type} (the map {} cache bypass)",
                    if write { "write" } else { "read" },
                    if r.caps & CAP_FP_CACHE_BYPASS != 0 {
                        "offers"
                    } else {
                        "does not offer"
                    }
                ),
            );
            return None;
        }
        let len = le_u32(f, 0x1C);
        if mirror_write && self.cfg.pcie_bw_limited && len > LARGE_IO_BYTES {
            self.violate(
                Violation::LargeRaid1FastPathWrite,
                format!("SMID {smid}: {len} bytes on a PCIe-bandwidth-limited controller"),
            );
            return None;
        }
        self.cache_bypass_writes += u64::from(bypass);
        let mut c = self.ld_command(mem, frame_addr, f, flags, init, true)?;
        c.target = u16::from(r.target);
        c.pd = false;
        c.arm = Some(arm);
        c.stale = le_u16(f, 0x60 + 0x1A) != r.seq;
        if let LdKind::Write { lba, blocks } = c.kind
            && mirror_write
        {
            self.intake_r1_half = true;
            let peer = le_u16(f, 0x60 + 0x14);
            if !self.raid1_half(smid, peer, arm, lba, blocks) {
                return None;
            }
        }
        if write && self.fail_arm_write.is_some_and(|(a, _)| a == arm) {
            c.fail = self.fail_arm_write.take().map(|(_, f)| f);
        }
        Some(c)
    }

    /// Takes in a RAID-1 FastPath write half on SMID `smid` naming peer SMID `peer`: the first
    /// of a pair waits (by its peer's SMID) for a second that names it back, goes to the other
    /// arm and writes the same blocks. False (a violation) for anything else.
    fn raid1_half(&mut self, smid: u16, peer: u16, arm: usize, lba: u64, blocks: u32) -> bool {
        if let Some(h) = self.r1_expected.remove(&smid) {
            if h.smid != peer || h.arm == arm || h.lba != lba || h.blocks != blocks {
                self.violate(
                    Violation::Raid1PairMalformed,
                    format!("SMID {smid} (peer {peer}, arm {arm}, {blocks} at {lba}) does not mirror {h:?}"),
                );
                return false;
            }
            self.raid1_write_pairs += 1;
            return true;
        }
        let limit = 2 * self.max_fw_cmds();
        if peer == 0 || peer > limit || peer == smid || self.outstanding[usize::from(peer)] {
            self.violate(
                Violation::Raid1PairMalformed,
                format!("SMID {smid} names peer SMID {peer}"),
            );
            return false;
        }
        if let Some(h) = self.r1_expected.get(&peer) {
            let detail = format!("SMID {smid} names peer {peer}, already SMID {}'s", h.smid);
            self.violate(Violation::Raid1PairMalformed, detail);
            return false;
        }
        self.r1_expected.insert(peer, Raid1Half { smid, arm, lba, blocks });
        true
    }

    /// A system-PD request by the JBOD map: descriptor handle = frame handle = 0x100 + a
    /// system PD's id, RAID-context target id + 255, the FastPath IoFlag, the G35 or legacy
    /// type/nseg and sequence-number flags; a sequence number an earlier map gave is refused
    /// with 0x67 (nothing moves), one no map gave is a violation.
    fn jbod_command(
        &mut self,
        mem: &FakeMemory,
        frame_addr: u64,
        f: &[u8; 256],
        flags: u8,
        init: Init,
        desc_handle: Option<u16>,
    ) -> Option<LdCmd> {
        let handle = le_u16(f, 0);
        let id = handle.wrapping_sub(JBOD_HANDLE_BASE);
        let ctx = &f[0x60..0x80];
        let seq = le_u16(ctx, 0x1A);
        let seq_flags = if self.cfg.generation.g35_raid_context() {
            le_u16(ctx, 0) == 0x0012 && le_u16(ctx, 4) & (1 << 4) != 0
        } else {
            ctx[0] == 0x12 && ctx[4] == 0x88
        };
        let known = self.cfg.system_pds.iter().any(|&(pd, _)| pd == id);
        // By the RAID map's handle (no JBOD map): the device id as target, no sequence number
        // or sequence flags, the FastPath IoFlag.
        if self.cfg.raid_map_jbod_handles && !self.cfg.jbod_map && known && le_u16(ctx, 6) == id {
            if desc_handle.is_some_and(|h| h != handle)
                || le_u16(f, 0x24) & 0x4000 == 0
                || seq != 0
                || ctx[0] != 0
                || ctx[4] != 0
            {
                self.violate(
                    Violation::BadJbodMapRequest,
                    format!(
                        "by the RAID map's handle {handle:#x} (descriptor {desc_handle:x?}): IoFlags {:#x}, context {:x?}, sequence {seq:#x}",
                        le_u16(f, 0x24),
                        &ctx[..6]
                    ),
                );
                return None;
            }
            let mut c = self.ld_command(mem, frame_addr, f, flags, init, true)?;
            c.target = id;
            self.jbod_raid_map_served += 1;
            return Some(c);
        }
        if !self.cfg.jbod_map
            || !known
            || desc_handle.is_some_and(|h| h != handle)
            || le_u16(ctx, 6) != id + 255
            || le_u16(f, 0x24) & 0x4000 == 0
            || !seq_flags
            || seq < JBOD_SEQ_FIRST
            || seq > self.jbod_seq
        {
            self.violate(
                Violation::BadJbodMapRequest,
                format!(
                    "handle {handle:#x} (descriptor {desc_handle:x?}), target {}, IoFlags {:#x}, context {:x?}, sequence {seq:#x} (map {:#x})",
                    le_u16(ctx, 6),
                    le_u16(f, 0x24),
                    &ctx[..6],
                    self.jbod_seq
                ),
            );
            return None;
        }
        let mut c = self.ld_command(mem, frame_addr, f, flags, init, true)?;
        c.target = id;
        if seq != self.jbod_seq {
            self.jbod_stale += 1;
            c.fail = Some(Failure {
                status: 0x67,
                scsi_status: 0,
                sense: None,
            });
        } else {
            self.jbod_served += 1;
        }
        Some(c)
    }

    fn check_addr(&mut self, what: &str, addr: u64, len: u64) -> bool {
        if addr == u64::MAX && self.cfg.generation >= Generation::Ventura {
            self.violate(Violation::AllOnesAddress, String::from(what));
            return false;
        }
        if addr == 0 || !addr.is_multiple_of(16) {
            self.violate(
                Violation::InitBadFrame,
                format!("{what} address {addr:#x} zero or misaligned"),
            );
            return false;
        }
        let end = addr.saturating_add(len);
        if !self.cfg.ctrl64 && end > 1 << 32 {
            self.violate(Violation::AddressAbove4G, format!("{what} {addr:#x}"));
            return false;
        }
        if (addr >> 32) != ((end - 1) >> 32) {
            self.violate(
                Violation::AddressAbove4G,
                format!("{what} {addr:#x}+{len:#x} crosses 4 GiB"),
            );
            return false;
        }
        true
    }

    /// Reads the RDPQ array at `array`: one 16-byte entry {u64 ring base, two reserved dwords}
    /// per reply queue, the depth being IOC INIT's. Returns the ring bases, or records what is
    /// wrong and returns `None` (IOC INIT then fails).
    fn read_rdpq_array(&mut self, mem: &FakeMemory, array: u64, queues: u16, ring_len: u64) -> Option<Vec<u64>> {
        let entries = u64::from(queues) * 16;
        if !self.check_addr("RDPQ array", array, entries) {
            return None;
        }
        let mut raw = vec![0u8; entries as usize];
        if !mem.read("RDPQ array", array, &mut raw) {
            self.violate(Violation::InitBadFrame, format!("RDPQ array at {array:#x}"));
            return None;
        }
        let group = if self.cfg.generation <= Generation::Invader {
            8
        } else {
            16
        };
        let mut rings: Vec<u64> = Vec::with_capacity(usize::from(queues));
        for q in 0..usize::from(queues) {
            let e = &raw[q * 16..q * 16 + 16];
            let base = le_u64(e, 0);
            if base == u64::MAX && self.cfg.generation >= Generation::Ventura {
                self.violate(Violation::AllOnesAddress, format!("RDPQ ring {q}"));
                return None;
            }
            if base == 0 || !base.is_multiple_of(16) || le_u32(e, 8) != 0 || le_u32(e, 12) != 0 {
                self.violate(Violation::RdpqBadEntry, format!("entry {q}: {e:02x?}"));
                return None;
            }
            let end = base.saturating_add(ring_len) - 1;
            if !self.cfg.ctrl64 && end >> 32 != 0 {
                self.violate(Violation::AddressAbove4G, format!("RDPQ ring {q} at {base:#x}"));
                return None;
            }
            let window = base >> 32;
            if end >> 32 != window || rings.get(q - q % group).is_some_and(|&first| first >> 32 != window) {
                self.violate(
                    Violation::RdpqWindow,
                    format!("ring {q} at {base:#x}+{ring_len:#x} (groups of {group} share one 4 GiB window)"),
                );
                return None;
            }
            if let Some(p) = rings.iter().position(|&o| base < o + ring_len && o < base + ring_len) {
                self.violate(Violation::RdpqBadEntry, format!("rings {p} and {q} overlap"));
                return None;
            }
            rings.push(base);
        }
        Some(rings)
    }

    fn ioc_init(&mut self, mem: &FakeMemory, frame_addr: u64) {
        let mut mfi = [0u8; 64];
        if !mem.read("IOC INIT MFI frame", frame_addr, &mut mfi) {
            return;
        }
        let fail = |s: &mut Self, v: Violation, d: String| {
            s.violate(v, d);
            mem.write("IOC INIT status", frame_addr + 2, &[0x03]);
        };
        if mfi[2] != 0xFF {
            return fail(
                self,
                Violation::InitStatusNotPreset,
                format!("cmd_status {:#x}", mfi[2]),
            );
        }
        if mfi[0] != 0 || le_u32(&mfi, 0x14) != 72 {
            return fail(
                self,
                Violation::InitBadFrame,
                format!("cmd {:#x} len {}", mfi[0], le_u32(&mfi, 0x14)),
            );
        }
        let caps = le_u32(&mfi, 0x04);
        self.init_caps = Some(caps);
        if caps >> 17 != 0 {
            self.warn(Violation::InitBadFrame, format!("unknown capability bits {caps:#x}"));
        }
        let req_addr = le_u64(&mfi, 0x18);
        let mut r = [0u8; 72];
        if !mem.read("IOC INIT request", req_addr, &mut r) {
            return fail(self, Violation::InitBadFrame, format!("request at {req_addr:#x}"));
        }
        if r[0] != 4 || r[3] != 2 || le_u16(&r, 0x0C) != 0x0200 || le_u16(&r, 0x0E) != 0x1000 || le_u16(&r, 0x1A) != 64
        {
            return fail(
                self,
                Violation::InitBadFrame,
                format!("request header {:x?}", &r[..0x20]),
            );
        }
        if r[0x16] != 0 && r[0x16] != 12 {
            return fail(self, Violation::InitBadFrame, format!("HostPageSize {}", r[0x16]));
        }
        let rdpq = r[7] & 1 != 0;
        if rdpq && !self.cfg.rdpq {
            return fail(self, Violation::RdpqNotSupported, String::new());
        }
        let coalesce_mask = le_u16(&mfi, 0x12);
        if coalesce_mask != 0 && !self.cfg.coalescing {
            return fail(
                self,
                Violation::BadCoalescingMask,
                format!("replyqueue_mask {coalesce_mask:#x} without SP1 bit 26"),
            );
        }
        if u32::from(coalesce_mask) >> (u32::from(r[0x17].max(1)) / 8) != 0 {
            return fail(
                self,
                Violation::BadCoalescingMask,
                format!("replyqueue_mask {coalesce_mask:#x} with {} vectors", r[0x17]),
            );
        }
        let depth = u32::from(le_u16(&r, 0x1C));
        let min_depth = u32::from(self.cfg.raw_cmds).min(16384);
        if depth == 0 || depth % 16 != 0 || depth < min_depth {
            return fail(self, Violation::BadQueueDepth, format!("depth {depth}"));
        }
        let vectors = r[0x17];
        if vectors > 0
            && (!self.cfg.msix_capable
                || u16::from(vectors) > self.cfg.fw_queues
                || u16::from(vectors) > self.cfg.msix_table)
        {
            return fail(self, Violation::TooManyMsixVectors, format!("{vectors} vectors"));
        }
        let sense_hi = le_u32(&r, 0x20);
        if sense_hi != 0 && !self.cfg.ctrl64 {
            return fail(self, Violation::AddressAbove4G, format!("sense high {sense_hi:#x}"));
        }
        let frames = le_u64(&r, 0x28);
        let replies = le_u64(&r, 0x30);
        let queues = u16::from(vectors.max(1));
        let frames_len = 256 * (u64::from(self.max_fw_cmds()) + 1);
        let ring_len = 8 * u64::from(depth);
        if !self.check_addr("request frames", frames, frames_len) {
            mem.write("IOC INIT status", frame_addr + 2, &[0x03]);
            return;
        }
        let rings = if rdpq {
            match self.read_rdpq_array(mem, replies, queues, ring_len) {
                Some(rings) => rings,
                None => {
                    mem.write("IOC INIT status", frame_addr + 2, &[0x03]);
                    return;
                }
            }
        } else {
            if !self.check_addr("reply queues", replies, ring_len * u64::from(queues)) {
                mem.write("IOC INIT status", frame_addr + 2, &[0x03]);
                return;
            }
            (0..u64::from(queues)).map(|q| replies + q * ring_len).collect()
        };
        if !mem.contains(frames, frames_len as usize) || rings.iter().any(|&b| !mem.contains(b, ring_len as usize)) {
            return fail(
                self,
                Violation::InitBadFrame,
                String::from("frames or reply queues outside DMA memory"),
            );
        }
        let mut slots = vec![0u8; ring_len as usize];
        for (q, &base) in rings.iter().enumerate() {
            mem.read("reply queues", base, &mut slots);
            if let Some(i) = slots.iter().position(|&b| b != 0xFF) {
                return fail(
                    self,
                    Violation::ReplySlotsNotAllOnes,
                    format!("byte {i} of reply queue {q}"),
                );
            }
        }
        if let Some(status) = self.fail_next_init.take() {
            mem.write("IOC INIT status", frame_addr + 2, &[status]);
            if self.cfg.fault_on_failed_init {
                self.state = 0xF;
                self.fault_bits = (0x0A1 << 16) | (1 << 1);
            }
            return;
        }
        self.init = Some(Init {
            frames,
            depth,
            queues,
            vectors,
            sense_hi,
        });
        self.producer = vec![0; usize::from(queues)];
        self.rings = rings;
        self.init_rdpq = rdpq;
        self.init_coalesce_mask = coalesce_mask;
        self.replies_per_queue = vec![0; usize::from(queues)];
        self.posted_at = vec![VecDeque::new(); usize::from(queues)];
        self.host_index = vec![0; usize::from(queues)];
        self.raised = vec![false; usize::from(queues)];
        self.outstanding.iter_mut().for_each(|o| *o = false);
        self.r1_expected.clear();
        self.state = 0xC;
        self.operational_shown_at = self.clock + self.cfg.operational_lag_us;
        self.atomic_ok = self.cfg.generation == Generation::Aero && self.cfg.bit24;
        mem.write("IOC INIT status", frame_addr + 2, &[0x00]);
    }

    fn passthrough(&mut self, mem: &FakeMemory, frame: &[u8; 256]) -> Option<()> {
        let sge = &frame[0x80..0x90];
        if frame[2] != 8 || sge[15] & 0x80 == 0 || le_u32(sge, 8) < 64 {
            self.violate(
                Violation::BadPassthrough,
                format!(
                    "ChainOffset {} SGE flags {:#x} len {}",
                    frame[2],
                    sge[15],
                    le_u32(sge, 8)
                ),
            );
            return None;
        }
        let mfi_addr = le_u64(sge, 0);
        let mut mfi = [0u8; 64];
        if !mem.read("MFI frame", mfi_addr, &mut mfi) {
            return None;
        }
        let status = if mfi[0] != 0x05 {
            0x01
        } else {
            let opcode = le_u32(&mfi, 0x18);
            if self.cfg.fault_on_dcmd == Some(opcode) {
                self.state = 0xF;
                self.fault_bits = (0x0DC << 16) | (1 << 1);
                self.forget_commands();
                return None;
            }
            let flags = le_u16(&mfi, 0x10);
            let xfer = le_u32(&mfi, 0x14);
            if xfer == 0 && (mfi[7] != 0 || flags & 0x18 != 0) {
                self.violate(
                    Violation::NoDataDcmdWithSge,
                    format!("opcode {opcode:#x}: sge_count {} flags {flags:#x}", mfi[7]),
                );
                mem.write("MFI cmd_status", mfi_addr + 2, &[0x03]);
                return Some(());
            }
            let (addr, len) = if mfi[7] == 0 {
                (0, 0)
            } else if flags & 0x2 != 0 {
                (le_u64(&mfi, 0x28), le_u32(&mfi, 0x30))
            } else {
                (u64::from(le_u32(&mfi, 0x28)), le_u32(&mfi, 0x2C))
            };
            self.dcmd(mem, opcode, &mfi[0x1C..0x28], addr, len as usize)
        };
        if let Some(h) = self.sync_held.as_mut() {
            // Held: no status until the configuration changes.
            h.mfi = mfi_addr;
            return Some(());
        }
        mem.write("MFI cmd_status", mfi_addr + 2, &[status]);
        Some(())
    }

    /// The RAID map DCMD's size in the format in force; None: the model has no map DCMD
    /// (Thunderbolt, or a Ventura/Aero whose SP2 announces none).
    fn raid_map_bytes(&self) -> Option<usize> {
        match self.cfg.generation {
            Generation::Thunderbolt => None,
            Generation::Invader if self.ext_raid_map() => Some(crate::raidmap::EXT_MAP_BYTES),
            Generation::Invader => Some(crate::raidmap::LEGACY_MAP_BYTES),
            _ => (self.cfg.raid_map_units > 0).then(|| usize::from(self.cfg.raid_map_units) * 64 * 1024),
        }
    }

    /// Invader's map is the extended one: 256 LDs offered and max_255lds in IOC INIT.
    fn ext_raid_map(&self) -> bool {
        (self.cfg.max_lds > 64 || self.cfg.ext_lds) && self.init_caps.is_some_and(|c| c & (1 << 3) != 0)
    }

    /// Whether the driver's map-sync list (`lds` entries of {target, 0, sequence} at `addr`)
    /// differs from the model's map: then the sync is answered at once with the map.
    fn map_sync_stale(&mut self, mem: &FakeMemory, lds: u8, addr: u64) -> bool {
        let Some(r) = self.cfg.raid0.as_ref() else {
            return lds != 0;
        };
        let (target, seq) = (r.target, r.seq);
        let mut entry = [0u8; 4];
        if lds != 1 || !mem.read("map sync list", addr, &mut entry) {
            return true;
        }
        if entry[0] != target || le_u16(&entry, 2) != seq {
            return true;
        }
        self.map_syncs_held += 1;
        false
    }

    fn dcmd(&mut self, mem: &FakeMemory, opcode: u32, mbox: &[u8], addr: u64, len: usize) -> u8 {
        let mut out = vec![0u8; len];
        let put = |out: &mut Vec<u8>, off: usize, b: &[u8]| {
            if off + b.len() <= out.len() {
                out[off..off + b.len()].copy_from_slice(b);
            }
        };
        let lds: Vec<(u8, u64)> = self
            .lds
            .iter()
            .filter(|l| !l.pd)
            .map(|l| (l.target, l.blocks))
            .collect();
        match opcode {
            0x0101_0000 => {
                // Linux's and FreeBSD's megasas_ctrl_info is 0x950 bytes.
                if len < 0x950 {
                    self.violate(Violation::DcmdBufferTooSmall, format!("CTRL_GET_INFO {len} B"));
                    return 0x03;
                }
                put(&mut out, 0, &0x1000u16.to_le_bytes());
                let dev: u16 = match self.cfg.generation {
                    Generation::Thunderbolt => 0x005B,
                    Generation::Invader => 0x005D,
                    Generation::Ventura => 0x0014,
                    Generation::Aero => 0x10E2,
                };
                put(&mut out, 2, &dev.to_le_bytes());
                put(&mut out, 0xB4, &1u32.to_le_bytes());
                put(&mut out, 0xC0, b"5.160.02-FAKE");
                put(&mut out, 0x540, b"MegaRAID Fusion model");
                put(&mut out, 0x590, b"FAKE0001");
                put(&mut out, 0x5B8, &self.cfg.raw_cmds.to_le_bytes());
                put(&mut out, 0x5BA, &(self.max_num_sge() as u16).to_le_bytes());
                put(&mut out, 0x5BC, &2048u32.to_le_bytes());
                put(&mut out, 0x5C0, &(lds.len() as u16).to_le_bytes());
                put(&mut out, 0x53F, &[self.cfg.max_lds]);
                put(&mut out, 0x5C6, &(self.cfg.system_pds.len() as u16).to_le_bytes());
                let on_off = u32::from(self.cfg.ocr_disabled) << 10;
                put(&mut out, 0x620, &on_off.to_le_bytes());
                let ops3 = (u32::from(self.cfg.jbod_map) << 24) | (u32::from(self.cfg.ext_lds) << 5);
                put(&mut out, 0x7E8, &ops3.to_le_bytes());
            }
            0x0301_0000 => {
                // MR_LD_LIST is 4104 bytes in Linux and FreeBSD.
                if len < 8 + 256 * 16 {
                    self.violate(Violation::DcmdBufferTooSmall, format!("LD_GET_LIST {len} B"));
                    return 0x03;
                }
                let all = self.cfg.max_lds > 64 && mbox[0] == 1;
                let lds: Vec<(u8, u64)> = lds.into_iter().filter(|&(t, _)| all || t < 64).collect();
                put(&mut out, 0, &(lds.len() as u32).to_le_bytes());
                for (i, (t, blocks)) in lds.iter().enumerate() {
                    let e = 8 + 16 * i;
                    put(&mut out, e, &[*t]);
                    put(&mut out, e + 4, &[3]);
                    put(
                        &mut out,
                        e + 8,
                        &(blocks * u64::from(self.cfg.block_size) / 512).to_le_bytes(),
                    );
                }
            }
            0x0301_0100 => {
                put(&mut out, 0, &(12 + lds.len() as u32).to_le_bytes());
                put(&mut out, 4, &(lds.len() as u32).to_le_bytes());
                for (i, (t, _)) in lds.iter().enumerate() {
                    put(&mut out, 12 + i, &[*t]);
                }
            }
            0x0201_0100 => {
                // MR_PD_LIST of the system PDs (JBOD) for mbox b[0] = 5 (exposed to host).
                let pds = if mbox[0] == 5 {
                    self.cfg.system_pds.clone()
                } else {
                    Vec::new()
                };
                put(&mut out, 0, &((8 + 24 * pds.len()) as u32).to_le_bytes());
                put(&mut out, 4, &(pds.len() as u32).to_le_bytes());
                for (i, &(id, _)) in pds.iter().enumerate() {
                    put(&mut out, 8 + 24 * i, &id.to_le_bytes());
                    put(&mut out, 8 + 24 * i + 2, &0xFFFFu16.to_le_bytes());
                }
            }
            0x0300_E101 if self.raid_map_bytes().is_some() => {
                let want = self.raid_map_bytes().unwrap_or(0);
                if len != want {
                    self.violate(
                        Violation::RaidMapBufferSize,
                        format!("LD_MAP_GET_INFO {len} B, the map in force is {want}"),
                    );
                    return 0x03;
                }
                if mbox[1] == 1 && !self.map_sync_stale(mem, mbox[0], addr) {
                    self.sync_held = Some(HeldSync {
                        opcode,
                        mfi: 0,
                        addr,
                        len,
                    });
                    return 0xFF;
                }
                let map = match &self.cfg.raid0 {
                    Some(r) => {
                        let mut m = match (r.mirror, r.pds.as_slice()) {
                            (true, &[a, b]) => crate::raidmap::build_dynamic_raid1(
                                r.target,
                                [a, b],
                                r.strip_shift,
                                r.rows,
                                r.seq,
                                r.caps,
                            ),
                            _ => crate::raidmap::build_dynamic(r.target, &r.pds, r.strip_shift, r.rows, r.seq, r.caps),
                        };
                        if let Some((at, bytes)) = &r.damage {
                            m[*at..*at + bytes.len()].copy_from_slice(bytes);
                        }
                        m
                    }
                    None => crate::raidmap::build_dynamic_empty(),
                };
                let mut map = map;
                if self.cfg.raid_map_jbod_handles {
                    for &(pd, _) in &self.cfg.system_pds {
                        let e = crate::raidmap::layout::HANDLES + usize::from(pd) * 8;
                        let handle = JBOD_HANDLE_BASE + pd;
                        map[e..e + 2].copy_from_slice(&handle.to_le_bytes());
                        map[e + 2] = 1; // valid handles
                        map[e + 4..e + 6].copy_from_slice(&handle.to_le_bytes());
                    }
                }
                if self.cfg.generation < Generation::Ventura {
                    map = crate::raidmap::fixed_from_dynamic(&map, self.ext_raid_map());
                }
                put(&mut out, 0, &map);
            }
            0x0200_E102 => {
                if !self.cfg.jbod_map || len < JBOD_MAP_BYTES {
                    self.violate(
                        Violation::BadJbodMapRequest,
                        format!("SYSTEM_PD_MAP_GET_INFO {len} B, offered: {}", self.cfg.jbod_map),
                    );
                    return if self.cfg.jbod_map { 0x03 } else { 0x02 };
                }
                if mbox[0] == 1 {
                    self.sync_held = Some(HeldSync {
                        opcode,
                        mfi: 0,
                        addr,
                        len,
                    });
                    return 0xFF;
                }
                put(&mut out, 0, &(JBOD_MAP_BYTES as u32).to_le_bytes());
                put(&mut out, 4, &256u32.to_le_bytes());
                for id in 0..256usize {
                    let e = 8 + 8 * id;
                    match self.cfg.system_pds.iter().any(|&(pd, _)| usize::from(pd) == id) {
                        true => {
                            put(&mut out, e, &self.jbod_seq.to_le_bytes());
                            put(&mut out, e + 2, &(JBOD_HANDLE_BASE + id as u16).to_le_bytes());
                            put(&mut out, e + 6, &(id as u16).to_le_bytes());
                        }
                        false => {
                            put(&mut out, e + 2, &0xFFFFu16.to_le_bytes());
                            put(&mut out, e + 6, &0xFFFFu16.to_le_bytes());
                        }
                    }
                }
            }
            0x0110_1000 | 0x0105_0000 => {}
            _ => return 0x02,
        }
        if len > 0 && !mem.write("DCMD data", addr, &out) {
            return 0x03;
        }
        0x00
    }

    fn ld_command(
        &mut self,
        mem: &FakeMemory,
        frame_addr: u64,
        f: &[u8; 256],
        flags: u8,
        init: Init,
        pd: bool,
    ) -> Option<LdCmd> {
        let cdb = &f[0x40..0x50];
        let (kind, want_dir, blocks) = match cdb[0] {
            0x08 | 0x0A => {
                let lba = u64::from(u32::from_be_bytes([0, cdb[1] & 0x1F, cdb[2], cdb[3]]));
                let b = if cdb[4] == 0 { 256 } else { u32::from(cdb[4]) };
                (rw(cdb[0] == 0x0A, lba, b), Some(cdb[0] == 0x0A), Some(b))
            }
            0x28 | 0x2A => {
                let lba = u64::from(u32::from_be_bytes([cdb[2], cdb[3], cdb[4], cdb[5]]));
                let b = u32::from(u16::from_be_bytes([cdb[7], cdb[8]]));
                (rw(cdb[0] == 0x2A, lba, b), Some(cdb[0] == 0x2A), Some(b))
            }
            0xA8 | 0xAA => {
                let lba = u64::from(u32::from_be_bytes([cdb[2], cdb[3], cdb[4], cdb[5]]));
                let b = u32::from_be_bytes([cdb[6], cdb[7], cdb[8], cdb[9]]);
                (rw(cdb[0] == 0xAA, lba, b), Some(cdb[0] == 0xAA), Some(b))
            }
            0x88 | 0x8A => {
                let lba = u64::from_be_bytes(cdb[2..10].try_into().unwrap_or([0; 8]));
                let b = u32::from_be_bytes([cdb[10], cdb[11], cdb[12], cdb[13]]);
                (rw(cdb[0] == 0x8A, lba, b), Some(cdb[0] == 0x8A), Some(b))
            }
            0x9E if cdb[1] & 0x1F == 0x10 && !self.cfg.no_read_capacity16 => {
                (LdKind::ReadCapacity16, Some(false), None)
            }
            0x25 if !self.cfg.no_read_capacity10 => (LdKind::ReadCapacity10, Some(false), None),
            0x12 => (LdKind::Inquiry, Some(false), None),
            // SYNCHRONIZE CACHE(16) is not shown to work on MegaRAID LDs: only (10) is ever sent
            // by Linux and FreeBSD, so the model refuses (16) with ILLEGAL REQUEST.
            0x00 | 0x35 => (LdKind::NoData, None, None),
            _ => (LdKind::Unsupported, None, None),
        };
        let is_rw = matches!(kind, LdKind::Read { .. } | LdKind::Write { .. });
        if !pd && is_rw != (flags != 0x00) {
            self.violate(
                Violation::DescriptorFunctionMismatch,
                format!("descriptor {flags:#x} with CDB {:#x}", cdb[0]),
            );
            return None;
        }
        if !is_rw && !pd {
            let ctx = &f[0x60..0x80];
            let rw_fields = if self.cfg.generation.g35_raid_context() {
                le_u16(ctx, 0) != 0 || le_u16(ctx, 4) & (1 << 4) != 0
            } else {
                ctx[0] != 0 || ctx[4] != 0
            };
            if rw_fields {
                self.violate(
                    Violation::NonRwRaidContext,
                    format!("CDB {:#x} with RAID context {:x?}", cdb[0], &ctx[..6]),
                );
                return None;
            }
        }
        let control = le_u32(f, 0x3C);
        let want_control = match want_dir {
            Some(true) => 0x0100_0000,
            Some(false) => 0x0200_0000,
            None => 0,
        };
        if control != want_control && !matches!(kind, LdKind::Unsupported) {
            self.violate(
                Violation::DirectionMismatch,
                format!("Control {control:#x} for CDB {:#x}", cdb[0]),
            );
            return None;
        }
        let data_len = le_u32(f, 0x1C);
        if let Some(b) = blocks {
            let want = u64::from(b) * u64::from(self.cfg.block_size);
            if u64::from(data_len) != want {
                self.violate(
                    Violation::DataLengthMismatch,
                    format!("DataLength {data_len}, CDB wants {want}"),
                );
                return None;
            }
        }
        if f[0x12] == 0 {
            self.violate(Violation::SenseLengthZero, String::new());
            return None;
        }
        let sense = u64::from(le_u32(f, 0x0C)) | (u64::from(init.sense_hi) << 32);
        if !mem.contains(sense, 96) {
            self.violate(Violation::SenseOutsidePool, format!("sense at {sense:#x}"));
            return None;
        }
        let sgl = self.walk_sgl(mem, f)?;
        let sum: u64 = sgl.iter().map(|s| u64::from(s.1)).sum();
        if sum != u64::from(data_len) {
            self.violate(
                Violation::SglLengthMismatch,
                format!("SGEs {sum} DataLength {data_len}"),
            );
            return None;
        }
        let held = is_rw && self.hold_next > 0;
        if held {
            self.hold_next -= 1;
        }
        let fail = if is_rw { self.fail_next.pop_front() } else { None };
        Some(LdCmd {
            frame: frame_addr,
            arm: None,
            stale: false,
            target: if pd { le_u16(f, 0x66) } else { le_u16(f, 0) },
            pd,
            kind,
            sgl,
            data_len,
            sense,
            held,
            fail,
        })
    }

    fn walk_sgl(&mut self, mem: &FakeMemory, f: &[u8; 256]) -> Option<Vec<(u64, u32)>> {
        let g = self.cfg.generation;
        let co = f[2];
        if co != 0 && co != 0x0F {
            self.violate(Violation::BadChainOffset, format!("ChainOffset {co:#x}"));
            return None;
        }
        let claimed = if g.g35_raid_context() {
            usize::from(le_u16(f, 0x60 + 0x1C) & 0x0FFF)
        } else {
            usize::from(f[0x60 + 0x19]) | (usize::from(f[0x60 + 0x1E]) << 8)
        };
        let eol = g.end_of_list_flag();
        let mut sges: Vec<(u64, u32, u8)> = Vec::new();
        let mut chain_seen = false;
        for i in 0..8 {
            let e = &f[0x80 + 16 * i..0x90 + 16 * i];
            let flags = e[15];
            if e.iter().all(|&b| b == 0) {
                break;
            }
            if flags & 0x80 != 0 {
                if i != 7 {
                    self.violate(Violation::ChainNotInSlot7, format!("chain element in slot {i}"));
                    return None;
                }
                if co != 0x0F {
                    self.violate(
                        Violation::BadChainOffset,
                        String::from("chain element with ChainOffset 0"),
                    );
                    return None;
                }
                let len = le_u32(e, 8) as usize;
                if claimed < 8 || len != 16 * (claimed - 7) {
                    self.violate(
                        Violation::ChainLengthMismatch,
                        format!("chain Length {len}, num_sge {claimed}"),
                    );
                    return None;
                }
                let mut chain = vec![0u8; len];
                if !mem.read("chain frame", le_u64(e, 0), &mut chain) {
                    return None;
                }
                for c in chain.chunks(16) {
                    if c[15] & 0x80 != 0 {
                        self.violate(Violation::NestedChain, String::new());
                        return None;
                    }
                    sges.push((le_u64(c, 0), le_u32(c, 8), c[15]));
                }
                chain_seen = true;
                break;
            }
            sges.push((le_u64(e, 0), le_u32(e, 8), flags));
        }
        if co == 0x0F && !chain_seen {
            self.violate(Violation::ChainOffsetWithoutChain, String::new());
            return None;
        }
        if eol {
            let n = sges.len();
            if let Some(i) = sges.iter().position(|s| s.2 & 0x40 != 0)
                && i + 1 < n
            {
                self.violate(Violation::EarlyEndOfList, format!("end of list on SGE {i} of {n}"));
                return None;
            }
            if sges.last().is_some_and(|s| s.2 & 0x40 == 0) {
                self.violate(Violation::MissingEndOfList, String::new());
                return None;
            }
        }
        if sges.len() != claimed {
            self.violate(
                Violation::NumSgeMismatch,
                format!("num_sge {claimed}, SGEs {}", sges.len()),
            );
            return None;
        }
        if sges.len() > self.max_num_sge() {
            self.violate(
                Violation::TooManySges,
                format!("{} SGEs, max {}", sges.len(), self.max_num_sge()),
            );
            return None;
        }
        for (i, s) in sges.iter().enumerate() {
            if s.1 == 0 {
                self.violate(Violation::ZeroLengthSge, format!("SGE {i}"));
                return None;
            }
            if s.0 == u64::MAX && g >= Generation::Ventura {
                self.violate(Violation::AllOnesAddress, format!("SGE {i}"));
                return None;
            }
        }
        Some(sges.into_iter().map(|s| (s.0, s.1)).collect())
    }

    /// Executes an LD command's data movement and status, then stores the reply.
    fn post(&mut self, mem: &FakeMemory, p: Pending) -> bool {
        let Some(init) = self.init else {
            return true;
        };
        let q = usize::from(p.queue);
        let d = init.depth;
        if (self.producer[q] + 1) % d == self.host_index[q] {
            self.violate(
                Violation::QueueFull,
                format!("queue {q}: producer {} caught the consumer", self.producer[q]),
            );
            self.pending.push(p);
            return false;
        }
        if let Work::Ld(c) = &p.work {
            self.execute(mem, c);
        }
        let slot = self.rings[q] + 8 * u64::from(self.producer[q]);
        if mem.load_u64_atomic(slot) != Some(ALL_ONES) {
            self.violate(
                Violation::ReplySlotNotFree,
                format!("queue {q} slot {} not all-ones", self.producer[q]),
            );
        }
        let reply = u64::from(p.queue as u8) << 8 | u64::from(p.smid) << 16;
        // One 64-bit store, as the hardware writes a descriptor in one transaction: the driver
        // polls the slot, and byte by byte it could take a half-written descriptor.
        if !mem.store_u64_atomic(slot, reply) {
            mem.write_u64("reply descriptor", slot, reply);
        }
        self.producer[q] = (self.producer[q] + 1) % d;
        let now = self.clock;
        self.posted_at[q].push_back(now);
        self.replies_per_queue[q] += 1;
        self.outstanding[usize::from(p.smid)] = false;
        self.replies_posted += 1;
        if init.vectors > 0 {
            self.raised[q] = true;
        } else {
            self.intr_status |= 0x8;
        }
        true
    }

    fn execute(&mut self, mem: &FakeMemory, c: &LdCmd) {
        if self.execute_raid0(mem, c) {
            return;
        }
        let bs = u64::from(self.cfg.block_size);
        let mut status = (0u8, 0u8, None);
        let ld = self
            .lds
            .iter()
            .position(|l| u16::from(l.target) == c.target && l.pd == c.pd);
        let mut moved = c.data_len;
        match (ld, c.kind, c.fail) {
            (_, _, Some(f)) => {
                status = (f.status, f.scsi_status, f.sense);
                moved = 0;
            }
            (None, _, _) => {
                status = (0x0C, 0, None);
                moved = 0;
            }
            (Some(i), LdKind::Read { lba, blocks } | LdKind::Write { lba, blocks }, _) => {
                let write = matches!(c.kind, LdKind::Write { .. });
                if lba
                    .checked_add(u64::from(blocks))
                    .is_none_or(|e| e > self.lds[i].blocks)
                {
                    status = (0x2D, 0x02, Some((0x5, 0x21, 0x00)));
                    moved = 0;
                } else {
                    let start = (lba * bs) as usize;
                    let len: usize = c.sgl.iter().map(|&(_, n)| n as usize).sum();
                    let runs = c.sgl.iter().map(|&(addr, n)| (addr, n as usize));
                    // A stray segment is recorded by the memory; the command still completes.
                    mem.transfer(write, runs, &mut self.lds[i].data[start..start + len]);
                }
            }
            (Some(i), LdKind::ReadCapacity16, _) => {
                let mut b = [0u8; 32];
                b[0..8].copy_from_slice(&(self.lds[i].blocks - 1).to_be_bytes());
                b[8..12].copy_from_slice(&self.cfg.block_size.to_be_bytes());
                let n = self.cfg.capacity16_bytes.min(32);
                moved = self.scatter(mem, &c.sgl, &b[..n]);
            }
            (Some(i), LdKind::ReadCapacity10, _) => {
                let mut b = [0u8; 8];
                let last = u32::try_from(self.lds[i].blocks - 1).unwrap_or(u32::MAX);
                b[0..4].copy_from_slice(&last.to_be_bytes());
                b[4..8].copy_from_slice(&self.cfg.block_size.to_be_bytes());
                moved = self.scatter(mem, &c.sgl, &b);
            }
            (Some(_), LdKind::Inquiry, _) => {
                let mut b = [0u8; 36];
                b[2] = 5;
                b[4] = 31;
                b[8..16].copy_from_slice(b"LSI     ");
                b[16..32].copy_from_slice(b"MR Fusion model ");
                moved = self.scatter(mem, &c.sgl, &b);
            }
            (Some(_), LdKind::NoData, _) => {}
            (Some(_), LdKind::Unsupported, _) => {
                status = (0x2D, 0x02, Some((0x5, 0x20, 0x00)));
                moved = 0;
            }
        }
        // Less data than asked for, otherwise fine: 0x2D with SCSI status GOOD and DataLength =
        // bytes moved, as Linux's `map_cmd_status` documents.
        if status.0 == 0
            && moved < c.data_len
            && matches!(
                c.kind,
                LdKind::ReadCapacity16 | LdKind::ReadCapacity10 | LdKind::Inquiry
            )
        {
            status = (0x2D, 0x00, None);
        }
        if let Some((key, asc, ascq)) = status.2 {
            let mut s = [0u8; 18];
            s[0] = 0x70;
            s[2] = key;
            s[7] = 10;
            s[12] = asc;
            s[13] = ascq;
            mem.write("sense", c.sense, &s);
        }
        mem.write("RAID context status", c.frame + 0x76, &[status.1, status.0]);
        mem.write_u32("DataLength", c.frame + 0x1C, moved);
    }

    /// The RAID-0 LD's reads and writes: by FastPath on one arm (checked against the
    /// firmware's own striping), or on the LD path spread block by block over the arms.
    /// False: not one of them.
    fn execute_raid0(&mut self, mem: &FakeMemory, c: &LdCmd) -> bool {
        let Some(r) = self.cfg.raid0.clone() else {
            return false;
        };
        let (write, lba, blocks) = match c.kind {
            LdKind::Read { lba, blocks } => (false, lba, blocks),
            LdKind::Write { lba, blocks } => (true, lba, blocks),
            _ => return false,
        };
        if c.target != u16::from(r.target) || c.pd || c.fail.is_some() {
            return false;
        }
        let bs = u64::from(self.cfg.block_size);
        let mut status = 0u8;
        let mut moved = c.data_len;
        let runs: Vec<(u64, usize)> = c.sgl.iter().map(|&(a, n)| (a, n as usize)).collect();
        if c.stale {
            self.stale_refusals += 1;
            status = 0x67;
            moved = 0;
        } else if let Some(arm) = c.arm {
            let arm_blocks = r.rows << r.strip_shift;
            let last = lba + u64::from(blocks).max(1) - 1;
            if blocks == 0 || last >= arm_blocks || lba >> r.strip_shift != last >> r.strip_shift {
                self.violate(
                    Violation::FastPathOutsideStrip,
                    format!(
                        "arm {arm}: blocks {lba}..={last}, strip {} blocks",
                        1u64 << r.strip_shift
                    ),
                );
                status = 0x2E;
                moved = 0;
            } else {
                self.fastpath_served += 1;
                self.fastpath_by_arm[arm] += 1;
                let at = (lba * bs) as usize;
                let len = blocks as usize * bs as usize;
                mem.transfer(write, runs, &mut self.arms[arm][at..at + len]);
            }
        } else if lba + u64::from(blocks) > r.blocks() {
            status = 0x2D;
            moved = 0;
            let mut s = [0u8; 18];
            s[0] = 0x70;
            s[2] = 0x5;
            s[7] = 10;
            s[12] = 0x21;
            mem.write("sense", c.sense, &s);
        } else {
            // The LD path: the firmware stripes block by block.
            let mut data = vec![0u8; blocks as usize * bs as usize];
            if !write {
                for (i, b) in (lba..lba + u64::from(blocks)).enumerate() {
                    let (arm, pd_lba) = r.place(b);
                    let at = (pd_lba * bs) as usize;
                    data[i * bs as usize..(i + 1) * bs as usize].copy_from_slice(&self.arms[arm][at..at + bs as usize]);
                }
            }
            mem.transfer(write, runs, &mut data);
            if write {
                for (i, b) in (lba..lba + u64::from(blocks)).enumerate() {
                    let (arm, pd_lba) = r.place(b);
                    let at = (pd_lba * bs) as usize;
                    let block = &data[i * bs as usize..(i + 1) * bs as usize];
                    self.arms[arm][at..at + bs as usize].copy_from_slice(block);
                    if r.mirror {
                        self.arms[1][at..at + bs as usize].copy_from_slice(block);
                    }
                }
            }
        }
        let scsi = if status == 0x2D { 0x02 } else { 0 };
        mem.write("RAID context status", c.frame + 0x76, &[scsi, status]);
        mem.write_u32("DataLength", c.frame + 0x1C, moved);
        true
    }

    fn scatter(&self, mem: &FakeMemory, sgl: &[(u64, u32)], data: &[u8]) -> u32 {
        let mut moved = 0;
        for (addr, piece) in sgl_pieces(sgl, data.len()) {
            moved = piece.end;
            mem.write("data", addr, &data[piece]);
        }
        moved as u32
    }
}

fn rw(write: bool, lba: u64, blocks: u32) -> LdKind {
    if write {
        LdKind::Write { lba, blocks }
    } else {
        LdKind::Read { lba, blocks }
    }
}
