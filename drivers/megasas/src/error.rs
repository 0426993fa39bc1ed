//! The crate's error type and the controller-fault reports of the completion path.

use core::fmt;

use crate::regs::{FwState, FwStatus};
use crate::status::IoError;

/// Why a value read from the reply queue was not accepted as a completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The producer index the device wrote lies outside the ring.
    ProducerOutOfRange {
        /// Value read from the producer word.
        producer: u32,
        /// Number of ring entries (valid indices are `0..entries`).
        entries: u32,
    },
    /// A reply-queue entry named no command that is in flight.
    BogusContext {
        /// The raw context read from the ring.
        context: u32,
        /// Ring slot it was read from.
        slot: u32,
        /// What was wrong with it.
        reason: BogusReason,
    },
}

/// Detail of a [`Fault::BogusContext`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BogusReason {
    /// The tag part is not below the number of tags.
    TagOutOfRange {
        /// Tag decoded from the context.
        tag: u32,
        /// Number of tags (valid tags are `0..tags`).
        tags: u16,
    },
    /// The tag exists but no command is in flight on it (a duplicate or invented completion).
    NotInFlight {
        /// Tag decoded from the context.
        tag: u16,
    },
    /// The tag is in flight, but under another generation: a stale completion of an earlier use.
    StaleGeneration {
        /// Tag decoded from the context.
        tag: u16,
        /// Generation of the command in flight.
        expected: u16,
        /// Generation in the context.
        found: u16,
    },
    /// The context matches a command in flight whose frame still says "pending": the device posted
    /// a completion before finishing the frame. The command is left in flight.
    StatusPending {
        /// Tag decoded from the context.
        tag: u16,
    },
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::ProducerOutOfRange { producer, entries } => write!(
                f,
                "reply-queue producer index {producer} is outside the ring (accepted 0..{entries})"
            ),
            Self::BogusContext { context, slot, reason } => {
                write!(f, "bogus context 0x{context:08X} in reply slot {slot}: ")?;
                match reason {
                    BogusReason::TagOutOfRange { tag, tags } => {
                        write!(f, "tag {tag} out of range (accepted 0..{tags})")
                    }
                    BogusReason::NotInFlight { tag } => {
                        write!(f, "tag {tag} has no command in flight")
                    }
                    BogusReason::StaleGeneration { tag, expected, found } => write!(
                        f,
                        "tag {tag} is in flight as generation {expected}, context has generation {found}"
                    ),
                    BogusReason::StatusPending { tag } => {
                        write!(f, "tag {tag} posted while its frame status is still pending (0xFF)")
                    }
                }
            }
        }
    }
}

impl From<devhal::DmaError> for Error {
    fn from(e: devhal::DmaError) -> Self {
        Self::Dma(e)
    }
}

/// Everything that can go wrong in the driver.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// The DMA allocator could not provide memory.
    Dma(devhal::DmaError),
    /// The firmware stayed in one state past the allowed time.
    FirmwareTimeout {
        /// The state it was stuck in.
        state: FwState,
        /// How long the driver waited, in microseconds.
        waited_us: u64,
    },
    /// Bring-up (or a controller reset) as a whole took longer than `Config::bringup_timeout_us`.
    BringupTimeout {
        /// The state the firmware was in when the driver gave up.
        state: FwState,
        /// How long the driver waited in total, in microseconds.
        waited_us: u64,
        /// The overall limit.
        limit_us: u64,
    },
    /// A controller reset is running: submissions are refused until it is done (requeue).
    Resetting,
    /// A controller reset could not start because a submitter did not leave its critical section
    /// in time (it will be retried).
    ResetDeferred,
    /// The admin tag and buffer are held by a polled command that timed out: the device may still
    /// write them, so they stay reserved until a controller reset.
    AdminQuarantined,
    /// No ABORT frame can be sent now (the admin tag is busy); try again later.
    AbortUnavailable,
    /// The command to abort is not in flight (it completed meanwhile) or an abort is already
    /// pending for it.
    NotAbortable {
        /// Tag of the command.
        tag: u16,
    },
    /// The firmware is in FAULT and the reset paths did not recover it.
    FirmwareFault {
        /// The status word read last.
        status: FwStatus,
    },
    /// The firmware kept changing state without reaching READY.
    FirmwareNoProgress {
        /// Number of state transitions seen.
        transitions: u32,
        /// The state it was in when the driver gave up.
        last: FwState,
    },
    /// The firmware status word advertises limits the driver cannot work with.
    FirmwareLimits {
        /// The status word.
        status: FwStatus,
        /// What is wrong.
        reason: &'static str,
    },
    /// The INIT frame was rejected.
    InitFailed {
        /// MFI status of the INIT frame.
        status: crate::MfiStatus,
    },
    /// INIT completed but the firmware did not become OPERATIONAL.
    NotOperationalAfterInit {
        /// State read after INIT.
        state: FwState,
    },
    /// The firmware left OPERATIONAL while the driver was running (a reset behind its back).
    FirmwareStateChanged {
        /// The state it is in now.
        state: FwState,
    },
    /// The controller is not operational (not initialised, shut down, or failed).
    NotOperational,
    /// A polled command did not complete in time. Its tag stays reserved: the device owns the frame.
    CommandTimeout {
        /// What the command was.
        what: &'static str,
        /// Tag it used.
        tag: u16,
        /// How long the driver waited, in microseconds.
        waited_us: u64,
    },
    /// A polled command completed with an error.
    CommandFailed {
        /// What the command was.
        what: &'static str,
        /// The decoded failure.
        error: IoError,
    },
    /// A reply from the device is malformed (size, count or field out of range).
    MalformedReply {
        /// Which reply.
        what: &'static str,
        /// The offending value.
        value: u64,
        /// What was accepted.
        expected: &'static str,
    },
    /// The tag is not below [`crate::Controller::max_inflight`].
    TagOutOfRange {
        /// The tag given.
        tag: u16,
        /// Number of tags (accepted `0..tags`).
        tags: u16,
    },
    /// A command is already in flight (or being built) on this tag.
    TagBusy {
        /// The tag given.
        tag: u16,
    },
    /// Another CPU is using the single admin DMA buffer.
    AdminBusy,
    /// The target is not a discovered logical drive.
    NoSuchDrive {
        /// Target id given.
        target: u8,
    },
    /// The request runs past the end of the drive.
    BeyondEnd {
        /// Target id.
        target: u8,
        /// First block.
        lba: u64,
        /// Number of blocks.
        blocks: u32,
        /// Capacity in blocks.
        capacity: u64,
    },
    /// A read or write of zero blocks, or a flush that carries data.
    InvalidRequest {
        /// What is wrong.
        reason: &'static str,
    },
    /// The request moves more data than the controller accepts in one command.
    TransferTooLarge {
        /// Bytes requested.
        bytes: u64,
        /// Largest accepted.
        max: u64,
    },
    /// More scatter-gather segments than the controller accepts.
    TooManySegments {
        /// Segments given.
        count: usize,
        /// Largest accepted.
        max: u16,
    },
    /// A segment with a zero address or zero length (QEMU rejects both).
    BadSegment {
        /// Index in the list.
        index: usize,
        /// Bus address.
        phys: u64,
        /// Length.
        len: u32,
    },
    /// The segments do not add up to the transfer length.
    SglLengthMismatch {
        /// Sum of the segment lengths.
        sgl_bytes: u64,
        /// Bytes the request transfers (blocks x block size).
        expected: u64,
    },
    /// A `megasas.*` command-line option has a bad key or value.
    BadOption {
        /// The option.
        option: &'static str,
        /// The word as given.
        value: alloc::string::String,
        /// What is accepted.
        expected: &'static str,
    },
    /// The reply queue or a completion was inconsistent (see [`Fault`]).
    ControllerFault(Fault),
    /// The controller has too few commands to serve I/O: one is the admin tag, and at least one
    /// more is needed. Its drives are refused at discovery rather than created unusable.
    NoIoTags {
        /// Tags the controller offers (the admin tag included).
        tags: u16,
    },
    /// The block layer refused the queue configuration of a drive.
    BlockLayer(blk::BlkError),
    /// A floor run found no free tag (block-layer I/O holds them): run it with the drives idle.
    FloorTagsBusy {
        /// Tags the run wanted.
        wanted: u16,
        /// Tags it got before the pool ran dry.
        got: u16,
    },
    /// A floor run saw no completion for its whole stall timeout; its commands stay the device's
    /// (their tags are freed when they complete).
    FloorStalled {
        /// Reads still in flight.
        in_flight: u16,
        /// Reads completed before the stall.
        completed: u32,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Dma(e) => write!(f, "DMA allocation failed: {e}"),
            Self::FirmwareTimeout { state, waited_us } => write!(
                f,
                "firmware stayed in state {state} for {waited_us} us without reaching READY"
            ),
            Self::BringupTimeout {
                state,
                waited_us,
                limit_us,
            } => write!(
                f,
                "firmware did not reach READY within the overall bring-up limit of {limit_us} us (waited {waited_us} us, last state {state})"
            ),
            Self::Resetting => f.write_str("controller reset in progress; requeue"),
            Self::ResetDeferred => f.write_str("controller reset deferred: a submission did not finish in time"),
            Self::AdminQuarantined => f.write_str(
                "the admin tag and buffer are quarantined after a timed-out command until a controller reset",
            ),
            Self::AbortUnavailable => f.write_str("no ABORT frame can be sent now: the admin tag is busy"),
            Self::NotAbortable { tag } => {
                write!(f, "tag {tag} has no posted command to abort")
            }
            Self::FirmwareFault { status } => {
                write!(f, "firmware is in FAULT and did not recover: status {status}")
            }
            Self::FirmwareNoProgress { transitions, last } => write!(
                f,
                "firmware changed state {transitions} times without reaching READY (last {last})"
            ),
            Self::FirmwareLimits { status, reason } => {
                write!(f, "unusable firmware limits ({reason}): status {status}")
            }
            Self::InitFailed { status } => write!(f, "INIT frame rejected with {status}"),
            Self::NotOperationalAfterInit { state } => write!(
                f,
                "INIT completed but the firmware is in state {state}, expected OPERATIONAL"
            ),
            Self::FirmwareStateChanged { state } => write!(
                f,
                "firmware left OPERATIONAL and is now in state {state}; re-initialise the controller"
            ),
            Self::NotOperational => f.write_str("controller is not operational"),
            Self::CommandTimeout { what, tag, waited_us } => write!(
                f,
                "{what} on tag {tag} did not complete within {waited_us} us; the tag stays reserved"
            ),
            Self::CommandFailed { what, error } => write!(f, "{what} failed: {error}"),
            Self::MalformedReply { what, value, expected } => {
                write!(f, "malformed {what}: value {value} (expected {expected})")
            }
            Self::TagOutOfRange { tag, tags } => {
                write!(f, "tag {tag} out of range (accepted 0..{tags})")
            }
            Self::TagBusy { tag } => write!(f, "tag {tag} already has a command in flight"),
            Self::AdminBusy => f.write_str("the admin buffer is in use by another command"),
            Self::NoSuchDrive { target } => {
                write!(f, "target {target} is not a discovered logical drive")
            }
            Self::BeyondEnd {
                target,
                lba,
                blocks,
                capacity,
            } => write!(
                f,
                "blocks {lba}..{} on target {target} run past its end ({capacity} blocks)",
                u128::from(*lba) + u128::from(*blocks)
            ),
            Self::InvalidRequest { reason } => write!(f, "invalid request: {reason}"),
            Self::TransferTooLarge { bytes, max } => {
                write!(f, "transfer of {bytes} bytes exceeds the controller limit of {max}")
            }
            Self::TooManySegments { count, max } => {
                write!(f, "{count} scatter-gather segments, accepted 1..={max}")
            }
            Self::BadSegment { index, phys, len } => write!(
                f,
                "segment {index} (address 0x{phys:X}, length {len}) has a zero address or length"
            ),
            Self::SglLengthMismatch { sgl_bytes, expected } => write!(
                f,
                "segments total {sgl_bytes} bytes but the request transfers {expected}"
            ),
            Self::BadOption {
                option,
                value,
                expected,
            } => write!(f, "bad {option} in \"{value}\": accepted values are {expected}"),
            Self::ControllerFault(fault) => write!(f, "controller fault: {fault}"),
            Self::NoIoTags { tags } => write!(
                f,
                "the controller offers {tags} command slot(s); one is the admin tag and I/O needs at least one more, so no drive is created"
            ),
            Self::BlockLayer(e) => write!(f, "block layer: {e}"),
            Self::FloorTagsBusy { wanted, got } => write!(
                f,
                "floor run wanted {wanted} tags but only {got} were free: block-layer I/O is in flight"
            ),
            Self::FloorStalled { in_flight, completed } => write!(
                f,
                "floor run stalled: nothing completed within the timeout ({completed} done, {in_flight} still the device's)"
            ),
        }
    }
}

impl core::error::Error for Error {}
