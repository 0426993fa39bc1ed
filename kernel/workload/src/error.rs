//! The crate's single error type.

use alloc::string::String;
use core::fmt;

use crate::job::ACCEPTED_KEYS;

/// Everything that can go wrong while parsing, planning or running a job.
///
/// Every message names the offending value and what would have been accepted, so the kernel can print
/// it as-is on the serial console.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkloadError {
    /// A job word is not of the form `key=value`.
    MalformedWord {
        /// The word as written.
        word: String,
    },
    /// The key is not one of [`ACCEPTED_KEYS`].
    UnknownKey {
        /// The key as written.
        key: String,
    },
    /// `key=` with nothing after the `=`.
    MissingValue {
        /// The key whose value is empty.
        key: &'static str,
    },
    /// The value could not be parsed or is out of range.
    MalformedValue {
        /// The key.
        key: &'static str,
        /// The value as written.
        value: String,
        /// The accepted form or range, in words.
        expected: String,
    },
    /// The same key appears twice in one job section (or twice before the first `job=`).
    DuplicateKey {
        /// The key.
        key: &'static str,
        /// The job (or `global`) section it appeared in.
        section: String,
    },
    /// Two jobs share a name.
    DuplicateJobName {
        /// The repeated name.
        name: String,
    },
    /// Two settings of one job contradict each other.
    ConflictingKeys {
        /// The job.
        job: String,
        /// The first key of the pair.
        first: &'static str,
        /// The second key of the pair.
        second: &'static str,
        /// Why they cannot be combined.
        reason: &'static str,
    },
    /// The job names no device and there is not exactly one to choose from.
    MissingDevice {
        /// The job.
        job: String,
        /// Names of the devices that exist (comma-separated; empty when there are none).
        available: String,
    },
    /// The job names a device that does not exist.
    UnknownDevice {
        /// The job.
        job: String,
        /// The name asked for.
        device: String,
        /// Names of the devices that exist.
        available: String,
    },
    /// A device description handed in by the kernel is inconsistent.
    InvalidDevice {
        /// The device.
        device: String,
        /// Which field is wrong.
        field: &'static str,
        /// Its value.
        value: u64,
        /// What the field must satisfy.
        requirement: &'static str,
    },
    /// The job lists a CPU that is not online.
    CpuNotOnline {
        /// The job.
        job: String,
        /// The CPU asked for.
        cpu: u32,
        /// The online CPUs, as a CPU list.
        online: String,
    },
    /// The job selects no CPU at all.
    NoCpus {
        /// The job.
        job: String,
    },
    /// A byte value is not a multiple of the alignment it needs.
    Misaligned {
        /// The job.
        job: String,
        /// The key holding the value.
        key: &'static str,
        /// The value in bytes.
        value: u64,
        /// The required alignment in bytes.
        alignment: u64,
        /// What the alignment comes from (e.g. "the device sector size").
        because: &'static str,
    },
    /// `offset + size` runs past the end of the device.
    JobLargerThanDevice {
        /// The job.
        job: String,
        /// The device.
        device: String,
        /// First byte past the job's region.
        end_bytes: u64,
        /// Device capacity in bytes.
        capacity_bytes: u64,
    },
    /// The region holds fewer blocks than there are submitting CPUs.
    RegionTooSmall {
        /// The job.
        job: String,
        /// Blocks of `bs` in the region.
        blocks: u64,
        /// Submitting CPUs.
        cpus: u32,
    },
    /// A verify job with random or repeated writes tracks one word per block, and the region is too big.
    VerifyRegionTooLarge {
        /// The job.
        job: String,
        /// Blocks each CPU would track.
        blocks_per_cpu: u64,
        /// The limit per CPU.
        max: u64,
    },
    /// `run_cpu` was called with a CPU index the plan does not have.
    CpuIndexOutOfRange {
        /// The index given.
        index: usize,
        /// The number of CPUs in the plan.
        cpus: usize,
    },
    /// The backend's buffer for a slot is shorter than the block size.
    BufferTooSmall {
        /// The slot.
        slot: usize,
        /// The buffer length.
        len: usize,
        /// The length needed (the job's `bs`).
        needed: usize,
    },
    /// A CPU that runs several job contexts by turns had no memory for one's stack.
    NoContextStack {
        /// The CPU.
        cpu: u32,
        /// The stack's size.
        bytes: usize,
    },
    /// The backend reported a completion that does not match anything in flight.
    BogusCompletion {
        /// The CPU running the engine.
        cpu: u32,
        /// The slot reported.
        slot: usize,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// Requests stayed in flight with no completion for longer than the job's `io_timeout`.
    Stalled {
        /// The CPU running the engine.
        cpu: u32,
        /// Requests still in flight.
        in_flight: usize,
        /// Time since the last completion, in ns.
        waited_ns: u64,
        /// The job's `io_timeout`, in ns (the limit that was passed).
        limit_ns: u64,
    },
    /// fio's latency target: an I/O took longer than the target at queue depth 1 (with a 100%
    /// percentile), so no depth meets it.
    LatencyTargetMissed {
        /// The CPU running the engine.
        cpu: u32,
        /// The I/O's latency, in ns.
        latency_ns: u64,
        /// The job's `latency_target`, in ns.
        target_ns: u64,
    },
    /// Per-CPU results handed to the report do not match the plan.
    ResultsMismatch {
        /// The job.
        job: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// An output option (`--output-format`, `percentile_list`, the log options) that baremq cannot
    /// honour.
    BadOutputOption {
        /// The option as fio names it.
        key: &'static str,
        /// The value given.
        value: String,
        /// Why it is refused.
        reason: &'static str,
    },
    /// A fio job file or fio command line is not well formed (section header, word, value syntax).
    FioSyntax {
        /// Where: `line N` of a job file or `word N` of a command line.
        at: String,
        /// What is wrong, naming the text.
        detail: String,
    },
    /// A fio option that baremq does not carry out with fio's meaning: refused by name rather
    /// than silently ignored or changed.
    FioUnsupported {
        /// The job (or `global`).
        job: String,
        /// The option as written (`rate_iops`, or `rw=trim` for a value).
        option: String,
        /// Why, and what to do instead.
        reason: String,
    },
    /// The devices of a job's `filename` list cannot serve one job together.
    FileList {
        /// The job.
        job: String,
        /// What is wrong, naming the devices, and what to do instead.
        detail: String,
    },
    /// A fio option's value is malformed or out of range.
    FioBadValue {
        /// The job (or `global`).
        job: String,
        /// The option.
        option: String,
        /// The value as written.
        value: String,
        /// The accepted form, in words.
        expected: String,
    },
}

impl fmt::Display for WorkloadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::FioSyntax { at, detail } => write!(f, "fio job: {at}: {detail}"),
            Self::FioUnsupported { job, option, reason } => {
                write!(
                    f,
                    "fio job {job:?}: option {option} is not supported by baremq: {reason}"
                )
            }
            Self::FileList { job, detail } => write!(f, "job {job:?}: filename list: {detail}"),
            Self::FioBadValue {
                job,
                option,
                value,
                expected,
            } => write!(f, "fio job {job:?}: invalid {option}={value:?}: expected {expected}"),
            Self::MalformedWord { word } => {
                write!(f, "job word {word:?} is not key=value")
            }
            Self::UnknownKey { key } => {
                write!(f, "unknown job key {key:?}; accepted keys: ")?;
                for (i, accepted) in ACCEPTED_KEYS.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    f.write_str(accepted)?;
                }
                Ok(())
            }
            Self::MissingValue { key } => write!(f, "job key {key} has an empty value"),
            Self::MalformedValue { key, value, expected } => {
                write!(f, "invalid {key}={value:?}: expected {expected}")
            }
            Self::DuplicateKey { key, section } => {
                write!(f, "key {key} given twice in section {section:?}")
            }
            Self::DuplicateJobName { name } => write!(f, "job name {name:?} used twice"),
            Self::ConflictingKeys {
                job,
                first,
                second,
                reason,
            } => {
                write!(f, "job {job:?}: {first} conflicts with {second}: {reason}")
            }
            Self::MissingDevice { job, available } => {
                if available.is_empty() {
                    write!(f, "job {job:?}: no block device is available")
                } else {
                    write!(f, "job {job:?}: device= is required (available: {available})")
                }
            }
            Self::UnknownDevice { job, device, available } => {
                write!(f, "job {job:?}: no device named {device:?} (available: {available})")
            }
            Self::InvalidDevice {
                device,
                field,
                value,
                requirement,
            } => {
                write!(
                    f,
                    "device {device:?} reports {field}={value}, but {field} must be {requirement}"
                )
            }
            Self::CpuNotOnline { job, cpu, online } => {
                write!(f, "job {job:?}: CPU {cpu} is not online (online: {online})")
            }
            Self::NoCpus { job } => write!(f, "job {job:?}: the cpus list selects no CPU"),
            Self::Misaligned {
                job,
                key,
                value,
                alignment,
                because,
            } => write!(
                f,
                "job {job:?}: {key}={value} is not a multiple of {alignment} ({because})"
            ),
            Self::JobLargerThanDevice {
                job,
                device,
                end_bytes,
                capacity_bytes,
            } => write!(
                f,
                "job {job:?}: offset+size ends at byte {end_bytes}, past the end of {device:?} \
                 ({capacity_bytes} bytes)"
            ),
            Self::RegionTooSmall { job, blocks, cpus } => write!(
                f,
                "job {job:?}: the region holds {blocks} blocks of bs, fewer than the {cpus} submitting CPUs"
            ),
            Self::VerifyRegionTooLarge {
                job,
                blocks_per_cpu,
                max,
            } => write!(
                f,
                "job {job:?}: verify with random or repeated writes tracks every block, and each CPU \
                 would track {blocks_per_cpu} blocks (limit {max}); reduce size, raise bs, or use \
                 rw=write without runtime (one sequential pass needs no tracking)"
            ),
            Self::CpuIndexOutOfRange { index, cpus } => {
                write!(f, "CPU index {index} is out of range: the job has {cpus} CPUs")
            }
            Self::NoContextStack { cpu, bytes } => write!(
                f,
                "cpu{cpu}: no memory for a job context's {bytes}-byte stack (the CPU runs several contexts by turns): \
                 run fewer clones or jobs at once"
            ),
            Self::BufferTooSmall { slot, len, needed } => write!(
                f,
                "backend buffer for slot {slot} holds {len} bytes, the job needs {needed}"
            ),
            Self::BogusCompletion { cpu, slot, reason } => {
                write!(f, "CPU {cpu}: backend completed slot {slot}, which {reason}")
            }
            Self::Stalled {
                cpu,
                in_flight,
                waited_ns,
                limit_ns,
            } => write!(
                f,
                "CPU {cpu}: {in_flight} requests in flight, no completion within io_timeout {} ms (waited {} ms)",
                limit_ns / 1_000_000,
                waited_ns / 1_000_000
            ),
            Self::LatencyTargetMissed {
                cpu,
                latency_ns,
                target_ns,
            } => write!(
                f,
                "CPU {cpu}: an I/O took {} us at queue depth 1, over latency_target {} us: no depth meets the \
                 target (fio: max latency exceeded)",
                latency_ns / 1_000,
                target_ns / 1_000
            ),
            Self::ResultsMismatch { job, reason } => {
                write!(f, "job {job:?}: per-CPU results do not match the plan: {reason}")
            }
            Self::BadOutputOption { key, value, reason } => {
                write!(f, "output option {key}={value:?} is refused: {reason}")
            }
        }
    }
}

impl core::error::Error for WorkloadError {}
