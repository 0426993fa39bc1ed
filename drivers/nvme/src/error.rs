//! The crate's one error type.

use core::fmt;

use devhal::DmaError;

use crate::status::NvmeStatus;

/// Everything the driver can refuse or fail with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// DMA memory could not be allocated.
    Dma(DmaError),
    /// CSTS read as all ones: the device is gone (surprise removal) or the BAR is not mapped.
    DeviceGone,
    /// A register value the driver cannot work with (CAP without the NVM command set, MPSMIN
    /// above 4 KiB, a zero-entry queue limit ...).
    Unsupported {
        /// What was wrong.
        what: &'static str,
        /// The value read.
        value: u64,
    },
    /// CSTS.RDY did not reach `want` within CAP.TO.
    ReadyTimeout {
        /// The RDY value waited for.
        want: bool,
        /// How long the driver waited, in milliseconds.
        waited_ms: u64,
        /// CSTS when it gave up.
        csts: u32,
    },
    /// The controller reported Controller Fatal Status (CSTS.CFS) while enabling or running.
    ControllerFatal {
        /// CSTS when it was seen.
        csts: u32,
    },
    /// An admin command did not complete within its deadline. The controller must be reset
    /// before the admin queue (and its buffer) is used again.
    AdminTimeout {
        /// Opcode of the command.
        opcode: u8,
        /// How long the driver waited, in microseconds.
        waited_us: u64,
    },
    /// An admin command completed with an error status.
    AdminFailed {
        /// Opcode of the command.
        opcode: u8,
        /// The decoded status.
        status: NvmeStatus,
    },
    /// A data segment cannot be described by PRPs: every segment but the first must start on a
    /// page boundary, every segment but the last must end on one, and the first must start on a
    /// 4-byte boundary.
    PrpMisaligned {
        /// Index of the offending segment.
        segment: usize,
        /// Its bus address.
        phys: u64,
        /// Its length.
        len: u32,
    },
    /// A transfer is longer than the controller's MDTS (or the driver's PRP list space).
    TransferTooLarge {
        /// Bytes asked for.
        bytes: u64,
        /// The limit.
        max: u64,
    },
    /// The segments do not add up to the transfer length, or a segment is empty.
    BadSegments {
        /// Bytes the segments describe.
        segment_bytes: u64,
        /// Bytes the command moves.
        command_bytes: u64,
    },
    /// A configuration value is out of range.
    InvalidConfig {
        /// Which value.
        field: &'static str,
        /// The value given.
        value: u64,
        /// What is accepted.
        accepted: &'static str,
    },
    /// The controller is not in a state that allows this (it failed, or is being reset).
    NotOperational,
    /// No namespace is active on the controller.
    NoNamespaces,
    /// A floor run (`blkdev::Host::measure_floor`) cannot start.
    FloorUnavailable {
        /// Why.
        reason: &'static str,
    },
    /// A floor run found fewer idle floor slots on its queue than its depth: another run holds
    /// them, or reads a stalled run left with the device have not completed yet.
    FloorBusy {
        /// Slots the run needs.
        wanted: u16,
        /// Idle slots found.
        free: u16,
    },
    /// A floor run saw no completion for its stall timeout; its reads still in flight stay the
    /// device's (and so does its buffer) until they complete or a reset ends them.
    FloorStalled {
        /// Reads left with the device.
        in_flight: u16,
        /// Reads completed before the stall.
        completed: u32,
        /// Time since the last completion, ms.
        waited_ms: u64,
    },
    /// An identify page held a value the driver refuses (e.g. an LBA format index out of range).
    BadIdentify {
        /// Which field.
        field: &'static str,
        /// The value read.
        value: u64,
    },
    /// Building a block-layer queue failed.
    Blk(blk::BlkError),
    /// A kernel command-line option the driver does not accept.
    BadOption {
        /// The word as given.
        word: alloc::string::String,
        /// What is accepted.
        accepted: &'static str,
    },
}

impl From<DmaError> for Error {
    fn from(e: DmaError) -> Self {
        Self::Dma(e)
    }
}

impl From<blk::BlkError> for Error {
    fn from(e: blk::BlkError) -> Self {
        Self::Blk(e)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Dma(e) => write!(f, "nvme: {e}"),
            Self::DeviceGone => write!(f, "nvme: CSTS reads all ones (device removed or BAR unmapped)"),
            Self::Unsupported { what, value } => write!(f, "nvme: unsupported {what} ({value:#x})"),
            Self::ReadyTimeout { want, waited_ms, csts } => write!(
                f,
                "nvme: CSTS.RDY did not become {} within {waited_ms} ms (CAP.TO); CSTS={csts:#x}",
                u8::from(*want)
            ),
            Self::ControllerFatal { csts } => write!(f, "nvme: controller fatal status (CSTS={csts:#x})"),
            Self::AdminTimeout { opcode, waited_us } => write!(
                f,
                "nvme: admin command {opcode:#04x} did not complete within {waited_us} us"
            ),
            Self::AdminFailed { opcode, status } => write!(f, "nvme: admin command {opcode:#04x} failed: {status}"),
            Self::PrpMisaligned { segment, phys, len } => write!(
                f,
                "nvme: segment {segment} ({phys:#x}, {len} bytes) cannot be described by PRPs (inner segments must be page aligned, the first dword aligned)"
            ),
            Self::TransferTooLarge { bytes, max } => {
                write!(
                    f,
                    "nvme: transfer of {bytes} bytes exceeds the limit of {max} bytes (MDTS)"
                )
            }
            Self::BadSegments {
                segment_bytes,
                command_bytes,
            } => write!(
                f,
                "nvme: segments describe {segment_bytes} bytes but the command moves {command_bytes} (or a segment is empty)"
            ),
            Self::InvalidConfig { field, value, accepted } => {
                write!(f, "nvme: {field}={value} is invalid (accepted: {accepted})")
            }
            Self::NotOperational => write!(f, "nvme: controller is not operational (failed or resetting)"),
            Self::NoNamespaces => write!(f, "nvme: no active namespace"),
            Self::FloorUnavailable { reason } => write!(f, "nvme: floor: {reason}"),
            Self::FloorBusy { wanted, free } => write!(
                f,
                "nvme: floor: {free} of the {wanted} floor slots needed are idle (another run, or reads of a stalled run still with the device)"
            ),
            Self::FloorStalled {
                in_flight,
                completed,
                waited_ms,
            } => write!(
                f,
                "nvme: floor: no completion for {waited_ms} ms ({completed} reads done, {in_flight} still with the device)"
            ),
            Self::BadIdentify { field, value } => {
                write!(f, "nvme: identify field {field} has unusable value {value:#x}")
            }
            Self::Blk(e) => write!(f, "nvme: block layer: {e}"),
            Self::BadOption { word, accepted } => write!(f, "nvme: bad option `{word}` (accepted: {accepted})"),
        }
    }
}

impl core::error::Error for Error {}
