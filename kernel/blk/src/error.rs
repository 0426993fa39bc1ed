//! The crate's single error type.

use core::fmt;

/// Everything that can go wrong in the block layer. Each variant carries the offending value and
/// what would have been accepted, so a log line is enough to diagnose it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlkError {
    /// A [`crate::QueueConfig`] field is out of range.
    InvalidConfig {
        /// The field's name.
        field: &'static str,
        /// The value given.
        value: u64,
        /// What is accepted, in words.
        accepted: &'static str,
    },
    /// An entry of a custom CPU-to-hardware-queue map names a queue that does not exist.
    BadCpuMap {
        /// The CPU whose entry is wrong.
        cpu: usize,
        /// The hardware queue it names.
        hwq: usize,
        /// Number of hardware queues.
        nr_hw_queues: usize,
    },
    /// A CPU index at or beyond the number of CPUs the queue was sized for.
    CpuOutOfRange {
        /// The CPU index given.
        cpu: usize,
        /// Number of CPUs.
        ncpus: usize,
    },
    /// A hardware queue index at or beyond the number of hardware queues.
    HwQueueOutOfRange {
        /// The index given.
        hwq: usize,
        /// Number of hardware queues.
        nr_hw_queues: usize,
    },
    /// A tag (for MegaRAID: the firmware context) at or beyond the tag-set depth.
    TagOutOfRange {
        /// The tag given.
        tag: u32,
        /// Depth of the tag set.
        depth: u32,
    },
    /// A completion for a tag that is not waiting for one: a double completion or a stale
    /// context from the device.
    NotInFlight {
        /// Hardware queue given with the completion.
        hwq: usize,
        /// The tag.
        tag: u32,
        /// The state the request was in.
        state: &'static str,
    },
    /// A completion for an earlier issue of a tag than the one in flight (a late completion
    /// after a timeout, or a stale context from the device): dropped, never delivered to the
    /// tag's current owner.
    StaleCompletion {
        /// The tag.
        tag: u32,
        /// The generation the completion carried.
        generation: u16,
        /// The generation of the tag's current (or last) issue.
        current: u16,
    },
    /// An I/O that reaches past the end of the device.
    BeyondEnd {
        /// First sector of the I/O.
        sector: u64,
        /// Length in sectors.
        nr_sectors: u32,
        /// Device capacity in 512-byte sectors.
        capacity: u64,
    },
    /// An I/O whose start or length is not a multiple of the logical block size.
    Misaligned {
        /// First sector.
        sector: u64,
        /// Length in sectors.
        nr_sectors: u32,
        /// Logical block size in 512-byte sectors.
        block_sectors: u32,
    },
    /// A read or write of zero sectors.
    EmptyIo,
    /// A flush that carries data.
    FlushWithData {
        /// The length given.
        nr_sectors: u32,
    },
    /// A discard on a queue whose device has no discard command
    /// ([`crate::QueueConfig::max_discard_sectors`] is 0).
    DiscardNotSupported,
    /// A discard given data segments: a discard is a range only.
    DiscardWithData {
        /// Segments given.
        segments: usize,
    },
    /// More scatter-gather segments than the queue was sized for.
    TooManySegments {
        /// Segments given.
        count: usize,
        /// Maximum per request.
        max: usize,
    },
    /// Segment lengths that do not add up to the I/O length.
    SegmentLengthMismatch {
        /// Sum of the segment lengths in bytes.
        segment_bytes: u64,
        /// `nr_sectors * 512`.
        io_bytes: u64,
    },
    /// No tag was free in the tag set (the caller may retry, or use `submit_wait`).
    TagsExhausted {
        /// Hardware queue whose tag set is full.
        hwq: usize,
        /// Tags in the pool that was searched.
        pool: u32,
        /// Whether the reserved (admin) pool was searched.
        reserved: bool,
    },
    /// The queue is frozen; no new request may enter.
    Frozen,
    /// Waiting for a condition took longer than allowed.
    WaitTimeout {
        /// What was waited for.
        what: &'static str,
        /// Requests still in the queue when the wait gave up.
        in_flight: usize,
    },
    /// `unfreeze` without a matching `freeze`.
    NotFrozen,
    /// `unquiesce` without a matching `quiesce`.
    NotQuiesced,
    /// The driver refused to initialise a request slot.
    DriverInit {
        /// The tag whose slot failed.
        tag: u32,
        /// The driver's reason.
        reason: &'static str,
    },
}

impl fmt::Display for BlkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::InvalidConfig { field, value, accepted } => {
                write!(f, "invalid queue config: {field} = {value}, accepted: {accepted}")
            }
            Self::BadCpuMap { cpu, hwq, nr_hw_queues } => write!(
                f,
                "cpu map sends cpu {cpu} to hw queue {hwq}, but there are only {nr_hw_queues} hw queues"
            ),
            Self::CpuOutOfRange { cpu, ncpus } => {
                write!(f, "cpu {cpu} out of range: the queue was sized for {ncpus} cpus")
            }
            Self::HwQueueOutOfRange { hwq, nr_hw_queues } => {
                write!(f, "hw queue {hwq} out of range: the queue has {nr_hw_queues} hw queues")
            }
            Self::TagOutOfRange { tag, depth } => {
                write!(f, "tag {tag} out of range: tags are 0..{depth}")
            }
            Self::NotInFlight { hwq, tag, state } => write!(
                f,
                "completion for hw queue {hwq} tag {tag}, which is not in flight (state {state}): double or stale completion"
            ),
            Self::StaleCompletion {
                tag,
                generation,
                current,
            } => write!(
                f,
                "stale completion for tag {tag} generation {generation}: the tag's current issue is generation {current}; dropped"
            ),
            Self::BeyondEnd {
                sector,
                nr_sectors,
                capacity,
            } => write!(
                f,
                "I/O at sector {sector} of {nr_sectors} sectors ends beyond the device's {capacity} sectors"
            ),
            Self::Misaligned {
                sector,
                nr_sectors,
                block_sectors,
            } => write!(
                f,
                "I/O at sector {sector} of {nr_sectors} sectors is not aligned to the {block_sectors}-sector logical block"
            ),
            Self::EmptyIo => write!(f, "read or write of 0 sectors: at least 1 is required"),
            Self::FlushWithData { nr_sectors } => {
                write!(f, "flush with {nr_sectors} sectors of data: a flush carries none")
            }
            Self::DiscardNotSupported => {
                write!(f, "discard (trim) refused: the device has no discard command")
            }
            Self::DiscardWithData { segments } => {
                write!(
                    f,
                    "discard with {segments} data segments: a discard is a range and carries none"
                )
            }
            Self::TooManySegments { count, max } => {
                write!(f, "{count} scatter-gather segments: at most {max} are accepted")
            }
            Self::SegmentLengthMismatch {
                segment_bytes,
                io_bytes,
            } => write!(f, "segments hold {segment_bytes} bytes but the I/O is {io_bytes} bytes"),
            Self::TagsExhausted { hwq, pool, reserved } => write!(
                f,
                "all {pool} {} tags of hw queue {hwq} are in use",
                if reserved { "reserved" } else { "normal" }
            ),
            Self::Frozen => write!(f, "queue is frozen: no new requests accepted"),
            Self::WaitTimeout { what, in_flight } => write!(
                f,
                "timed out waiting for {what}: {in_flight} requests still in the queue"
            ),
            Self::NotFrozen => write!(f, "unfreeze without freeze: freeze depth is 0"),
            Self::NotQuiesced => write!(f, "unquiesce without quiesce: quiesce depth is 0"),
            Self::DriverInit { tag, reason } => {
                write!(f, "driver failed to initialise request for tag {tag}: {reason}")
            }
        }
    }
}

impl core::error::Error for BlkError {}
