//! The crate's one error type.

use core::fmt;

use megasas::MfiStatus;

use crate::regs::{FwState, FwStatus, fault_codes};

/// Everything that can go wrong in the Fusion driver.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// DMA allocation failed.
    Dma(devhal::DmaError),
    /// A control structure the allocator returned lies above 4 GiB or crosses a 4 GiB boundary.
    DmaAbove4G {
        /// Which structure.
        what: &'static str,
        /// Its bus address.
        phys: u64,
        /// Its length.
        len: usize,
    },
    /// An RDPQ reply ring crosses a 4 GiB boundary or leaves the 4 GiB window its group of 8
    /// (Invader) or 16 rings must share.
    RdpqWindow {
        /// Reply queue.
        queue: usize,
        /// The ring's bus address.
        phys: u64,
        /// Its length.
        len: usize,
    },
    /// The firmware is in FAULT.
    FirmwareFault {
        /// SP0 as read.
        sp0: u32,
    },
    /// The firmware stayed in one state longer than the per-state limit.
    FirmwareStuck {
        /// SP0 as last read.
        sp0: u32,
        /// Microseconds waited in that state.
        waited_us: u64,
    },
    /// Bring-up (or a reset) did not finish within its overall deadline.
    Deadline {
        /// What was being waited for.
        step: &'static str,
        /// SP0 as last read.
        sp0: u32,
        /// The overall budget in microseconds.
        budget_us: u64,
    },
    /// SP0 reports a state the driver does not know.
    UnknownState {
        /// SP0 as read.
        sp0: u32,
    },
    /// A doorbell command did not finish (doorbell bit 0 stayed set).
    DoorbellBusy {
        /// Microseconds waited.
        waited_us: u64,
    },
    /// A scratch-pad or firmware limit is outside what the driver can use.
    Limits {
        /// Which value.
        what: &'static str,
        /// Its value.
        value: u64,
        /// What was expected.
        expected: &'static str,
    },
    /// IOC INIT completed with a non-zero status.
    InitFailed {
        /// MFI cmd_status the firmware wrote.
        status: u8,
        /// SP0 after the failure.
        sp0: u32,
    },
    /// IOC INIT did not complete in time.
    InitTimeout {
        /// SP0 when giving up.
        sp0: u32,
    },
    /// After IOC INIT the firmware is not OPERATIONAL.
    NotOperational {
        /// SP0 as read.
        sp0: u32,
    },
    /// A polled DCMD did not complete in time. Its SMID stays reserved until its reply arrives.
    DcmdTimeout {
        /// Opcode.
        opcode: u32,
    },
    /// A DCMD completed with an error status.
    DcmdFailed {
        /// Opcode.
        opcode: u32,
        /// MFI status.
        status: MfiStatus,
    },
    /// Every DCMD SMID is still waiting for its late reply.
    NoDcmdSlot,
    /// A firmware reply could not be parsed.
    Malformed(megasas::Error),
    /// An online controller reset is in progress: retry later.
    Resetting,
    /// The controller was given up (reset failed, or the firmware cannot be reset).
    Dead,
    /// The I/O tag is outside the controller's tag space.
    TagOutOfRange {
        /// Tag.
        tag: u32,
        /// Number of I/O tags.
        tags: u32,
    },
    /// The I/O tag already has a command on the controller.
    TagBusy {
        /// Tag.
        tag: u32,
    },
    /// The reply queue does not exist.
    QueueOutOfRange {
        /// Queue.
        queue: u16,
        /// Number of queues.
        queues: u16,
    },
    /// No logical drive with that target id.
    NoSuchDrive {
        /// Target id.
        target: u8,
    },
    /// The request reaches beyond the end of the drive.
    BeyondEnd {
        /// First block.
        lba: u64,
        /// Blocks.
        blocks: u32,
        /// Drive capacity in blocks.
        capacity: u64,
    },
    /// More scatter-gather segments than the controller takes.
    TooManySegments {
        /// Segments given.
        count: usize,
        /// Maximum.
        max: usize,
    },
    /// A segment of length zero.
    ZeroLengthSegment {
        /// Index in the list.
        index: usize,
    },
    /// The segments do not add up to the transfer length.
    SglLengthMismatch {
        /// Sum of segment lengths.
        sgl: u64,
        /// Transfer length.
        expected: u64,
    },
    /// The controller's OCR is disabled (ctrl info OnOff bit 10) or the fault is not resettable.
    ResetNotPossible {
        /// SP0 as read.
        sp0: u32,
    },
    /// Every reset attempt failed.
    ResetFailed {
        /// Attempts made.
        attempts: u32,
        /// SP0 after the last one.
        sp0: u32,
    },
    /// A RAID map value is out of range, or the map's structure is broken: the LD (or every
    /// LD) stays on the firmware LD path.
    RaidMap {
        /// Which field or rule.
        what: &'static str,
        /// The value the map gave.
        value: u64,
    },
    /// A bad configuration value.
    BadConfig {
        /// Which value.
        what: &'static str,
        /// Why.
        expected: &'static str,
    },
}

impl From<devhal::DmaError> for Error {
    fn from(e: devhal::DmaError) -> Self {
        Self::Dma(e)
    }
}

impl From<megasas::Error> for Error {
    fn from(e: megasas::Error) -> Self {
        Self::Malformed(e)
    }
}

/// Formats an SP0 word: state, and fault codes in FAULT.
pub(crate) struct Sp0(pub u32);

impl fmt::Display for Sp0 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let st = FwStatus(self.0).state();
        write!(f, "SP0 0x{:08X} ({st}", self.0)?;
        if st == FwState::Fault {
            let (code, sub) = fault_codes(self.0);
            write!(
                f,
                ", fault code 0x{code:03X} sub-code 0x{sub:02X}, {}",
                if self.0 & crate::regs::SP0_FAULT_RESETTABLE != 0 {
                    "resettable"
                } else {
                    "not resettable"
                }
            )?;
        } else {
            write!(f, ", {} max commands", self.0 & 0xFFFF)?;
        }
        f.write_str(")")
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Dma(e) => write!(f, "DMA allocation failed: {e}"),
            Self::DmaAbove4G { what, phys, len } => write!(
                f,
                "{what} at {phys:#x} (+{len:#x}) is not below 4 GiB; the driver keeps every control structure below 4 GiB"
            ),
            Self::RdpqWindow { queue, phys, len } => write!(
                f,
                "RDPQ reply ring {queue} at {phys:#x} (+{len:#x}) crosses a 4 GiB boundary or leaves its group's 4 GiB window"
            ),
            Self::FirmwareFault { sp0 } => write!(f, "firmware in FAULT: {}", Sp0(*sp0)),
            Self::FirmwareStuck { sp0, waited_us } => {
                write!(
                    f,
                    "firmware made no progress for {} ms: {}",
                    waited_us / 1000,
                    Sp0(*sp0)
                )
            }
            Self::Deadline { step, sp0, budget_us } => write!(
                f,
                "{step}: overall deadline of {} ms passed: {}",
                budget_us / 1000,
                Sp0(*sp0)
            ),
            Self::UnknownState { sp0 } => write!(f, "firmware reports an unknown state: {}", Sp0(*sp0)),
            Self::DoorbellBusy { waited_us } => {
                write!(f, "doorbell bit 0 stayed set for {} ms", waited_us / 1000)
            }
            Self::Limits { what, value, expected } => {
                write!(f, "firmware limit {what} = {value}: expected {expected}")
            }
            Self::InitFailed { status, sp0 } => {
                write!(f, "IOC INIT failed with status 0x{status:02X}: {}", Sp0(*sp0))
            }
            Self::InitTimeout { sp0 } => write!(f, "IOC INIT did not complete: {}", Sp0(*sp0)),
            Self::NotOperational { sp0 } => write!(f, "firmware not OPERATIONAL after IOC INIT: {}", Sp0(*sp0)),
            Self::DcmdTimeout { opcode } => write!(f, "DCMD 0x{opcode:08X} timed out"),
            Self::DcmdFailed { opcode, status } => write!(f, "DCMD 0x{opcode:08X} failed: {status}"),
            Self::NoDcmdSlot => f.write_str("every DCMD SMID still awaits its reply"),
            Self::Malformed(e) => write!(f, "{e}"),
            Self::Resetting => f.write_str("controller reset in progress"),
            Self::Dead => f.write_str("controller given up after a failed reset"),
            Self::TagOutOfRange { tag, tags } => write!(f, "tag {tag} out of range (0..{tags})"),
            Self::TagBusy { tag } => write!(f, "tag {tag} already has a command on the controller"),
            Self::QueueOutOfRange { queue, queues } => {
                write!(f, "reply queue {queue} out of range (0..{queues})")
            }
            Self::NoSuchDrive { target } => write!(f, "no logical drive with target id {target}"),
            Self::BeyondEnd { lba, blocks, capacity } => {
                write!(f, "blocks {lba}..+{blocks} reach beyond the drive's {capacity} blocks")
            }
            Self::TooManySegments { count, max } => write!(f, "{count} segments, at most {max}"),
            Self::ZeroLengthSegment { index } => write!(f, "segment {index} has length 0"),
            Self::SglLengthMismatch { sgl, expected } => {
                write!(f, "segments add up to {sgl} bytes, transfer is {expected}")
            }
            Self::ResetNotPossible { sp0 } => write!(f, "controller reset not possible: {}", Sp0(*sp0)),
            Self::ResetFailed { attempts, sp0 } => {
                write!(f, "controller reset failed after {attempts} attempts: {}", Sp0(*sp0))
            }
            Self::RaidMap { what, value } => write!(f, "RAID map refused: {what} ({value:#x})"),
            Self::BadConfig { what, expected } => write!(f, "bad configuration {what}: expected {expected}"),
        }
    }
}
