//! Job specifications and the parser for job words from the kernel command line.
//!
//! # Syntax
//!
//! A job list is a sequence of whitespace-separated `key=value` words.
//!
//! * Words before the first `job=NAME` are **global**: they are defaults for every job.
//! * Each `job=NAME` word starts a new job; the words after it (up to the next `job=`) set that job's
//!   keys, overriding the globals. Jobs run in the order written.
//! * With no `job=` word at all, the words describe one job named `job0`. No words at all means no job.
//! * A key may appear once per section; keys are case-sensitive and lower-case.
//!
//! [`parse_cmdline`] takes a whole kernel command line: if it has a standalone `--` word, only the
//! words after it are job words (the Linux convention for arguments meant for init); otherwise every
//! word is a job word.
//!
//! Example: `bs=4k device=md0 job=warm rw=write size=64m verify=crc32c job=mix rw=randrw rwmixread=70
//! runtime=5s cpus=0-3 iodepth=8`.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;

use crate::error::WorkloadError;
use crate::values::{
    BOOL_FORM, CPU_LIST_FORM, CpuSet, DURATION_FORM, SIZE_FORM, parse_bool, parse_duration_ns, parse_size, parse_u64,
    parse_u64_any_radix,
};

/// Every key the parser accepts, in the order the documentation lists them.
pub const ACCEPTED_KEYS: [&str; 20] = [
    "job",
    "rw",
    "rwmixread",
    "rwmixwrite",
    "bs",
    "iodepth",
    "cpus",
    "runtime",
    "size",
    "offset",
    "device",
    "verify",
    "verify_generation",
    "completion",
    "quiesce",
    "seed",
    "stop_on_error",
    "io_timeout",
    "trace",
    "destroy",
];

/// The default seed (ASCII "baremq" in the low bytes), fixed so that a verify pass in a later boot
/// regenerates the same data without being told the seed.
pub const DEFAULT_SEED: u64 = 0x0000_716d_6572_6162;
/// Largest `trace=N` (1 in N requests traced).
pub const MAX_TRACE_EVERY: u32 = 1 << 20;
/// The default block size in bytes.
pub const DEFAULT_BS: u32 = 4096;
/// The default `io_timeout`: how long requests may sit in flight with no completion at all.
pub const DEFAULT_IO_TIMEOUT_NS: u64 = 30_000_000_000;
/// Largest accepted `bs` (the device may impose a smaller one).
pub const MAX_BS: u64 = 16 << 20;
/// Largest accepted `iodepth` (the device may impose a smaller one).
pub const MAX_IODEPTH: u64 = 65_535;
/// Longest job name.
pub const MAX_JOB_NAME: usize = 32;

/// Read/write pattern (fio's `rw`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RwMode {
    /// Sequential reads.
    Read,
    /// Sequential writes.
    Write,
    /// Random reads.
    RandRead,
    /// Random writes.
    RandWrite,
    /// Random mix of reads and writes, `rwmixread` percent reads.
    RandRw,
    /// Sequential mix of reads and writes (fio's `rw=rw` / `readwrite`): each I/O is a read with
    /// probability `rwmixread` percent, and reads and writes each walk the region from its start
    /// (fio keeps a position per direction).
    ReadWrite,
    /// Sequential trims (discards), fio's `rw=trim`.
    Trim,
    /// Random trims, fio's `rw=randtrim` (each block once per pass with the random map).
    RandTrim,
    /// fio's `rw=trimwrite`: each block, in order, is trimmed and then written.
    TrimWrite,
    /// fio's `rw=randtrimwrite`: as `TrimWrite`, the blocks in random order.
    RandTrimWrite,
}

impl RwMode {
    /// The name used on the command line and in reports.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Write => "write",
            Self::RandRead => "randread",
            Self::RandWrite => "randwrite",
            Self::RandRw => "randrw",
            Self::ReadWrite => "rw",
            Self::Trim => "trim",
            Self::RandTrim => "randtrim",
            Self::TrimWrite => "trimwrite",
            Self::RandTrimWrite => "randtrimwrite",
        }
    }

    /// Every mode, in the order error messages list them.
    pub const ALL: [Self; 10] = [
        Self::Read,
        Self::Write,
        Self::RandRead,
        Self::RandWrite,
        Self::RandRw,
        Self::ReadWrite,
        Self::Trim,
        Self::RandTrim,
        Self::TrimWrite,
        Self::RandTrimWrite,
    ];

    /// The mode [`RwMode::as_str`] names.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|mode| mode.as_str() == name)
    }

    /// Whether each I/O's direction is drawn from `rwmixread` (`randrw`, `rw`).
    pub const fn is_mixed(self) -> bool {
        matches!(self, Self::RandRw | Self::ReadWrite)
    }

    /// Whether offsets are drawn at random (rather than walked in order).
    pub const fn is_random(self) -> bool {
        matches!(
            self,
            Self::RandRead | Self::RandWrite | Self::RandRw | Self::RandTrim | Self::RandTrimWrite
        )
    }

    /// Whether the job issues any writes.
    pub const fn writes(self) -> bool {
        matches!(
            self,
            Self::Write | Self::RandWrite | Self::RandRw | Self::ReadWrite | Self::TrimWrite | Self::RandTrimWrite
        )
    }

    /// Whether the job issues any trims (discards).
    pub const fn trims(self) -> bool {
        matches!(
            self,
            Self::Trim | Self::RandTrim | Self::TrimWrite | Self::RandTrimWrite
        )
    }

    /// Whether the job issues any reads.
    pub const fn reads(self) -> bool {
        matches!(self, Self::Read | Self::RandRead | Self::RandRw | Self::ReadWrite)
    }
}

/// How written blocks are stamped and read blocks checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VerifyMode {
    /// No stamping or checking.
    None,
    /// Header plus a CRC32C over the whole block.
    Crc32c,
    /// Header plus a deterministic pattern compared word by word.
    Pattern,
    /// fio's `verify=pattern`: the whole block is [`JobSpec::verify_pattern`] repeated from its
    /// first byte, no header (fio job files only).
    FioPattern,
    /// fio's `verify_pattern` without a `verify` option (fio 3.33 checks a header and the
    /// pattern): baremq's header over the first bytes of the repeated pattern (fio job files only).
    FioPatternHeader,
}

impl VerifyMode {
    /// The name used on the command line and in reports.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Crc32c => "crc32c",
            Self::Pattern => "pattern",
            Self::FioPattern => "fio-pattern",
            Self::FioPatternHeader => "fio-pattern+header",
        }
    }

    /// Whether blocks are stamped and checked.
    pub const fn is_enabled(self) -> bool {
        !matches!(self, Self::None)
    }
}

/// Which generation a read-only verify job expects in every block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpectedGeneration {
    /// Exactly this generation (1 after one sequential write pass).
    Exact(u32),
    /// Any generation from 1 up; the data must still match the generation found in the header.
    Any,
}

impl fmt::Display for ExpectedGeneration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Exact(generation) => write!(f, "{generation}"),
            Self::Any => f.write_str("any"),
        }
    }
}

/// Where completions run (the block layer's completion policies; the kernel maps these onto its own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompletionPolicy {
    /// Complete in the interrupt handler, on whichever CPU took the interrupt.
    Irq,
    /// Complete on the CPU that took the interrupt, outside the handler.
    Local,
    /// Send the completion back to the submitting CPU.
    Remote,
    /// The submitting CPU polls for its completions.
    Poll,
}

impl CompletionPolicy {
    /// The name used on the command line and in reports.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Irq => "irq",
            Self::Local => "local",
            Self::Remote => "remote",
            Self::Poll => "poll",
        }
    }
}

/// How the block layer's quiesce state is synchronised (kernel-mapped, like [`CompletionPolicy`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuiescePolicy {
    /// Atomic quiesce depth with paired full barriers.
    LockFree,
    /// A lock around the quiesce check.
    Locked,
    /// The same lock behaving as PREEMPT_RT's `spinlock_t` (an rt_mutex): a contended
    /// acquirer parks until the holder's unlock wakes it, then pays a reschedule cost.
    Sleeping,
}

impl QuiescePolicy {
    /// The name used on the command line and in reports.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::LockFree => "lockfree",
            Self::Locked => "locked",
            Self::Sleeping => "sleeping",
        }
    }
}

/// Classes of errors, as fio's `continue_on_error` names them: a read that failed, a write (or
/// a trim or flush) that failed, a verify mismatch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum ErrorClass {
    /// A read that failed.
    Read = 1,
    /// A write, trim or flush that failed.
    Write = 2,
    /// A block that read back other than written.
    Verify = 4,
}

impl ErrorClass {
    /// Every class (fio's `continue_on_error=all`).
    pub const ALL: u8 = Self::Read as u8 | Self::Write as u8 | Self::Verify as u8;
}

impl JobSpec {
    /// Whether an error of `class` stops the job (`stop_on_error`, less `continue_on`).
    pub fn stops_on(&self, class: ErrorClass) -> bool {
        self.stop_on_error && self.continue_on & class as u8 == 0
    }
}

/// Which CPUs submit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CpuSelection {
    /// Every online CPU.
    All,
    /// These CPUs (checked against the online CPUs when the job is planned).
    List(CpuSet),
    /// Each clone's CPU, in clone order; a CPU that appears several times runs those clones
    /// by turns (fio's clones outnumbering their CPUs).
    Clones(Vec<u32>),
}

impl CpuSelection {
    /// The CPUs named, each once.
    pub fn cpu_set(&self) -> Option<CpuSet> {
        match self {
            Self::All => None,
            Self::List(set) => Some(*set),
            Self::Clones(cpus) => Some(CpuSet::from_cpus(cpus)),
        }
    }
}

impl fmt::Display for CpuSelection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::All => f.write_str("all"),
            Self::List(set) => write!(f, "{set}"),
            Self::Clones(cpus) => {
                for (i, cpu) in cpus.iter().enumerate() {
                    write!(f, "{}{cpu}", if i == 0 { "" } else { "," })?;
                }
                Ok(())
            }
        }
    }
}

/// One job as written on the command line, with defaults filled in but not yet checked against a
/// device (see [`plan_job`](crate::plan_job)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobSpec {
    /// Job name (`job=`), `job0` when the command line has no `job=` word.
    pub name: String,
    /// Access pattern (`rw=`, default `read`).
    pub rw: RwMode,
    /// Percent of reads for `randrw` (`rwmixread=`, or `100 - rwmixwrite`; default 50).
    pub rwmixread: u8,
    /// Block size in bytes (`bs=`, default 4k).
    pub bs: u32,
    /// Requests kept in flight per CPU (`iodepth=`, default 1).
    pub iodepth: u32,
    /// Submitting CPUs (`cpus=`, default all).
    pub cpus: CpuSelection,
    /// Time limit (`runtime=`). With a runtime the job is time-based and wraps around its region.
    pub runtime_ns: Option<u64>,
    /// Region size in bytes (`size=`, default: from `offset` to the end of the device). Without a
    /// runtime the job transfers `size` bytes in all.
    pub size: Option<u64>,
    /// Region start in bytes (`offset=`, default 0).
    pub offset: u64,
    /// Block device name (`device=`); required when more than one device exists.
    pub device: Option<String>,
    /// Verification (`verify=`, default none).
    pub verify: VerifyMode,
    /// Expected generation for read-only verify jobs (`verify_generation=`, default 1).
    pub verify_generation: ExpectedGeneration,
    /// Completion policy (`completion=`); `None` leaves the block layer's default.
    pub completion: Option<CompletionPolicy>,
    /// Quiesce policy (`quiesce=`); `None` leaves the block layer's default.
    pub quiesce: Option<QuiescePolicy>,
    /// Seed for offsets and verify data (`seed=`, default [`DEFAULT_SEED`]).
    pub seed: u64,
    /// Stop the whole job at the first I/O error or verify mismatch (`stop_on_error=`, default no).
    pub stop_on_error: bool,
    /// With `stop_on_error`, the classes of errors the job goes on after anyway (fio's
    /// `continue_on_error=read|write|io|verify`): bits of [`ErrorClass`]; 0 stops on every one.
    pub continue_on: u8,
    /// Give up when requests are in flight and nothing completes for this long (`io_timeout=`).
    pub io_timeout_ns: u64,
    /// Stage tracing (`trace=N`): timestamp every stage of 1 in N requests; 0 (default) is off.
    pub trace_every: u32,
    /// The job may write over a partition table or file system it finds on the device
    /// (`destroy=`, default no: the kernel refuses such a write job).
    pub destroy: bool,
    // The fields below have no native word: only the fio front-end (`crate::fio`) sets them, and
    // their defaults keep the native meaning.
    /// fio's `runtime` without `time_based`: the runtime only caps a size-bound job (default
    /// false: a runtime makes the job time-based, the native meaning).
    pub runtime_is_cap: bool,
    /// Random jobs visit every block of the slice once per pass, in a seeded full-period
    /// permutation (fio's random map, its default); false: uniform draws with repeats (native,
    /// and fio's `norandommap`).
    pub random_map: bool,
    /// fio's `ramp_time`: run this long before measuring; the time is added to the runtime and
    /// nothing done during it is in the statistics.
    pub ramp_ns: u64,
    /// I/Os per CPU of a size-bound job (fio's `number_ios`, `io_size`, `loops`); `None`: one per
    /// block of the CPU's slice.
    pub ios_per_cpu: Option<u64>,
    /// fio's `numjobs` clones: `Some(increment)` gives every CPU a full copy of the region (not a
    /// slice of it), CPU `i`'s starting `i * increment` bytes after `offset` (`offset_increment`,
    /// 0 = the same region for all). `None`: the native disjoint slices.
    pub clone_increment: Option<u64>,
    /// fio's `rate` / `rate_iops` with the linear process: the least time between the starts of
    /// two I/Os of one direction on one CPU (`[read, write]`, 0 = no limit). Kept on average:
    /// an I/O that could not go on time lets the next ones catch up.
    pub io_interval_ns: [u64; 2],
    /// fio's `rate_process=poisson`: the gaps between a direction's I/O starts are exponential
    /// with mean `io_interval_ns` (seeded from `seed`) instead of equal (false: linear).
    pub rate_poisson: bool,
    /// The bytes of fio's `verify_pattern` for [`VerifyMode::FioPattern`] (empty otherwise).
    pub verify_pattern: Vec<u8>,
    /// fio's `thinktime`: after every `think_blocks` I/Os, wait for every I/O in flight to
    /// complete, then this long, before issuing more (0 = none).
    pub think_ns: u64,
    /// fio's `thinktime_blocks` (at least 1).
    pub think_blocks: u32,
    /// fio's `startdelay`: wait this long before the job's first I/O (not measured).
    pub start_delay_ns: u64,
    /// fio's `fsync=N` / `fdatasync=N`: after every N writes, wait for what is in flight, then
    /// flush the device's volatile cache and wait for the flush (0 = never).
    pub flush_every_writes: u32,
    /// fio's `end_fsync` / `fsync_on_close`: flush once when the main phase ends.
    pub end_flush: bool,
    /// fio's `verify_backlog=N` (verify jobs that write): after every N completed writes, read
    /// those blocks back and check them before drawing new I/Os (0 = only the verify pass).
    pub verify_backlog: u32,
    /// fio's `verify_interval` in bytes: a verify header (and, with crc32c, its checksum) every
    /// this many bytes of a block, each stamped with its own first sector; 0: one per block.
    pub verify_interval: u32,
    /// fio's `do_verify=0`: a job that writes stamps its blocks (for a later job or boot to
    /// check) but reads nothing back itself.
    pub skip_verify_pass: bool,
    /// fio's `flow`: this job's weight among the jobs of its wave with the same `flow_id`
    /// (0: no flow control; see [`crate::flow`]).
    pub flow_weight: u32,
    /// fio's `flow_id`.
    pub flow_id: u32,
    /// fio's `flow_sleep`: how long a held-back clone waits, once what it has in flight has
    /// completed, before it tries again (0: it tries again at once).
    pub flow_sleep_ns: u64,
    /// fio's `dedupe_*` and `buffer_compress_*`: what unverified writes carry, made per write
    /// ([`crate::content`]); `None`: one fill per buffer when the job starts.
    pub write_content: Option<crate::content::WriteContent>,
    /// fio's `rate_min` / `rate_iops_min` with `rate_cycle`: the job fails when a clone's rate
    /// over a cycle falls below them ([`RateMin`]).
    pub rate_min: Option<RateMin>,
    /// fio's `random_distribution=zoned` / `zoned_abs`: random offsets drawn zone by zone, each
    /// zone taking its share of the accesses (uniform, with repeats, inside it). Empty: the
    /// whole slice alike.
    pub zones: Vec<AccessZone>,
    /// fio's `random_distribution=zipf` / `pareto` / `normal`: random offsets drawn with that
    /// skew over each CPU's slice, with repeats (no random map). `None`: uniform.
    pub skew: Option<crate::skew::Skew>,
    /// fio's variable block sizes (`bssplit`, `bsrange` with unequal ends, `bs=R,W` with different
    /// sizes). `bs` is then the unit every size is a whole multiple of (the smallest size), and
    /// the region, the slices and the random map count blocks of that unit. `None`: every I/O is
    /// `bs` bytes (the fixed-size path, which costs nothing extra per I/O).
    pub bs_mix: Option<BlockSizeMix>,
    /// fio's `filename=a:b` lists: the job spreads its I/O over these regions, one per device,
    /// in order (at least two; empty: the one `device`, `offset`, `size`). Filled in by the fio
    /// front-end ([`FioJob::to_spec`](crate::fio::FioJob::to_spec)) with each file's region.
    pub files: Vec<FileRegion>,
    /// fio's `file_service_type`: which file each I/O goes to (with `files` only).
    pub file_service: FileService,
    /// What the fio front-end changed when it placed the job on its devices (a `size` cut at
    /// the device's end, as fio stops there), one line each, for the kernel to print.
    pub placement_notes: Vec<String>,
    /// fio's `exitall`: the first clone to end (its verify pass included) stops the others.
    pub exitall: bool,
    /// With `exitall`, the jobs of the same wave (indices in the wave, in job order) this job's
    /// end stops as well (fio's `exit_what`: its group, or every running job).
    pub exitall_stops: Vec<u32>,
    /// fio's `buffer_pattern`: the data of writes without verify, repeated from each I/O's first
    /// byte. Empty: baremq's own non-zero data.
    pub buffer_pattern: Vec<u8>,
    /// fio's steady state (`ss`, `ss_dur`, `ss_ramp`): each clone stops once its own IOPS or
    /// bandwidth window meets the criterion (with `group_reporting`, once the job's summed rates
    /// do).
    pub steady: Option<crate::steady::SteadyState>,
    /// fio's latency target: each clone searches for the deepest queue depth (up to `iodepth`)
    /// at which its I/Os finish within the target ([`LatencyTarget`]).
    pub latency_target: Option<LatencyTarget>,
    /// fio's `numa_mem_policy=bind:N` / `prefer:N`: the node the clones' buffers come from
    /// (`None`: each clone's own CPU's node).
    pub buffer_node: Option<u32>,
    /// fio's `numa_mem_policy=interleave:LIST`: the clone's buffers come from these nodes in
    /// turn, one I/O buffer each (empty: `buffer_node`, or the CPU's own node).
    pub buffer_interleave: Vec<u32>,
    /// fio's `blockalign` in blocks: random offsets are multiples of this many blocks, drawn
    /// with repeats (1: every block).
    pub align_blocks: u64,
    /// fio's offset modifier of a sequential `rw` (`rw=read:-8k`) in blocks: each offset is the
    /// end of the I/O before plus this (negative: backwards), with fio's wrap rules. 0: none.
    pub offset_add_blocks: i64,
    /// fio's `rw=randread:N`: a random offset every N I/Os, the N - 1 between them sequential
    /// from it (1: every I/O random).
    pub random_run: u32,
    /// fio's `loops` for a sequential walk with an offset modifier, whose pass ends before the
    /// region's I/O count: the walk starts over at its end this many times in all (1: once).
    pub modifier_passes: u64,
    /// fio's `zonemode=strided`: the I/O moves through zones of the region (see
    /// [`StridedZones`]). `None`: the region as one.
    pub strided_zones: Option<StridedZones>,
    /// fio's `numjobs` without `group_reporting`: fio reports each clone on its own, so the job's
    /// report also carries each clone's own ([`crate::JobReport::clones`]) for fio's output.
    pub report_each_clone: bool,
}

/// fio's strided zones, in blocks of the job: zone `z` starts `z x (range + skip)` blocks into
/// the job's region (from its first block to the device's end) and the job does `size` blocks
/// of I/O in it, sequential or random within its first `range` blocks (starting over there when
/// `size` is larger), before the next zone; a zone start past the device's end goes back to the
/// first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StridedZones {
    /// `zonesize`: blocks of I/O per zone.
    pub size: u64,
    /// `zonerange`: the zone's blocks the I/O goes to.
    pub range: u64,
    /// `zoneskip`: blocks skipped after the range.
    pub skip: u64,
}

/// One file of a job's `filename` list: a device and the region of it the job uses (for the
/// first clone; clone `i`'s is `i * clone_increment` further, as fio shifts each file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileRegion {
    /// The device's name.
    pub device: String,
    /// Region start in bytes.
    pub offset: u64,
    /// Region length in bytes.
    pub size: u64,
}

/// fio's `file_service_type`: how a job with several files picks the file of its next I/O.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileService {
    /// `roundrobin:N` (fio's default, N = 1): N I/Os on a file, then the next file still busy.
    RoundRobin(u32),
    /// `sequential`: every I/O of a file, then the next.
    Sequential,
    /// `random:N`: N I/Os on a file drawn uniformly among those still busy, then another draw.
    Random(u32),
}

impl Default for FileService {
    fn default() -> Self {
        Self::RoundRobin(1)
    }
}

impl fmt::Display for FileService {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::RoundRobin(n) => write!(f, "roundrobin:{n}"),
            Self::Sequential => f.write_str("sequential"),
            Self::Random(n) => write!(f, "random:{n}"),
        }
    }
}

/// fio's block sizes per direction, in units of [`JobSpec::bs`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockSizeMix {
    /// `[read, write]`: the sizes an I/O of that direction may take, in fio's lookup order
    /// (ascending share, as fio sorts `bssplit`); never empty.
    pub directions: [Vec<SizeChoice>; 2],
}

/// One `bssplit` entry, or a whole `bsrange` (`min_units < max_units`: a uniform draw of a whole
/// number of units between the two, as fio's range draw aligned to the minimum size).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SizeChoice {
    /// Smallest size, in units (at least 1).
    pub min_units: u32,
    /// Largest size, in units (at least `min_units`).
    pub max_units: u32,
    /// Percent of the direction's I/Os. The shares add up to at most 100; fio's lookup gives
    /// what is left to the last entry, and so does [`BlockSizeMix::draw_units`].
    pub percent: u32,
}

/// fio's `bssplit` form in bytes, read list then write list: `4096/10:32768/40:65536/50,65536/100`
/// (a range as `MIN-MAX/PERCENT`).
impl fmt::Display for BlockSizeMix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write_in(f, 1)
    }
}

impl BlockSizeMix {
    /// Writes the [`fmt::Display`] form with sizes in bytes, for a unit of `unit` bytes.
    pub fn write_in(&self, f: &mut dyn fmt::Write, unit: u64) -> fmt::Result {
        for (direction, choices) in self.directions.iter().enumerate() {
            if direction > 0 {
                f.write_char(',')?;
            }
            for (index, choice) in choices.iter().enumerate() {
                if index > 0 {
                    f.write_char(':')?;
                }
                write!(f, "{}", u64::from(choice.min_units) * unit)?;
                if choice.max_units != choice.min_units {
                    write!(f, "-{}", u64::from(choice.max_units) * unit)?;
                }
                write!(f, "/{}", choice.percent)?;
            }
        }
        Ok(())
    }

    /// The largest size of any direction, in units (what a slot buffer must hold).
    pub fn max_units(&self) -> u32 {
        self.directions.iter().flatten().map(|c| c.max_units).max().unwrap_or(1)
    }

    /// The size of one I/O of `direction` (0 read, 1 write) in units, from two uniform draws:
    /// `percent_draw` below 100 picks the entry, `range_draw` the size inside a range.
    pub fn draw_units(&self, direction: usize, percent_draw: u64, range_draw: u64) -> u32 {
        let choices = &self.directions[direction];
        let mut cumulative = 0u64;
        let mut picked = choices[choices.len() - 1];
        for choice in choices {
            cumulative += u64::from(choice.percent);
            if percent_draw < cumulative {
                picked = *choice;
                break;
            }
        }
        let span = u64::from(picked.max_units - picked.min_units) + 1;
        // span <= u32::MAX, so the sum fits in u32.
        picked.min_units + (range_draw % span) as u32
    }
}

/// One zone of fio's `random_distribution=zoned:A/R:...` (or `zoned_abs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AccessZone {
    /// Percent of the random accesses that land in this zone.
    pub access_percent: u8,
    /// The zone's length: a percent of the region (`zoned`) or bytes (`zoned_abs`).
    pub length: ZoneLength,
}

/// fio's `latency_target` with its `latency_window`, `latency_percentile` and `latency_run`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LatencyTarget {
    /// The latency an I/O (submission to completion) must not exceed.
    pub target_ns: u64,
    /// How long each depth is tried before it is judged (0: at every check).
    pub window_ns: u64,
    /// The share of a window's I/Os that must be within the target, in millionths of a percent
    /// (100% = 100,000,000).
    pub percentile_millionths: u32,
    /// `latency_run`: keep adjusting the depth for the whole run instead of stopping once it
    /// settles.
    pub keep_searching: bool,
}

/// How long an [`AccessZone`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZoneLength {
    /// Percent of the region.
    Percent(u8),
    /// Bytes.
    Bytes(u64),
}

impl JobSpec {
    /// A job with every default and the given name.
    pub fn with_defaults(name: &str) -> Self {
        Self {
            name: name.to_string(),
            rw: RwMode::Read,
            rwmixread: 50,
            bs: DEFAULT_BS,
            iodepth: 1,
            cpus: CpuSelection::All,
            runtime_ns: None,
            size: None,
            offset: 0,
            device: None,
            verify: VerifyMode::None,
            verify_generation: ExpectedGeneration::Exact(1),
            completion: None,
            quiesce: None,
            seed: DEFAULT_SEED,
            stop_on_error: false,
            continue_on: 0,
            io_timeout_ns: DEFAULT_IO_TIMEOUT_NS,
            trace_every: 0,
            destroy: false,
            runtime_is_cap: false,
            random_map: false,
            ramp_ns: 0,
            ios_per_cpu: None,
            clone_increment: None,
            io_interval_ns: [0, 0],
            rate_poisson: false,
            verify_pattern: Vec::new(),
            think_ns: 0,
            think_blocks: 1,
            start_delay_ns: 0,
            flush_every_writes: 0,
            end_flush: false,
            verify_backlog: 0,
            verify_interval: 0,
            skip_verify_pass: false,
            flow_weight: 0,
            flow_id: 0,
            flow_sleep_ns: 0,
            write_content: None,
            rate_min: None,
            zones: Vec::new(),
            skew: None,
            bs_mix: None,
            files: Vec::new(),
            file_service: FileService::RoundRobin(1),
            placement_notes: Vec::new(),
            exitall: false,
            exitall_stops: Vec::new(),
            buffer_pattern: Vec::new(),
            steady: None,
            latency_target: None,
            buffer_node: None,
            buffer_interleave: Vec::new(),
            align_blocks: 1,
            offset_add_blocks: 0,
            random_run: 1,
            modifier_passes: 1,
            strided_zones: None,
            report_each_clone: false,
        }
    }

    /// Whether I/Os are paced (`rate`, `rate_iops`, `thinktime`) or interleaved with flushes.
    pub fn is_paced(&self) -> bool {
        self.io_interval_ns != [0, 0]
            || self.think_ns != 0
            || self.flush_every_writes != 0
            || self.end_flush
            || self.latency_target.is_some()
            || self.flow_weight != 0
    }

    /// Whether the job runs for its runtime whatever its size (wrapping around its region), as
    /// opposed to moving a set number of I/Os (perhaps capped by a runtime).
    pub fn is_time_based(&self) -> bool {
        self.runtime_ns.is_some() && !self.runtime_is_cap
    }
}

/// fio's minimum rates: after a 2 s settle from the clone's start, every `cycle_ns` each
/// direction that moved data must have kept at least `bytes_per_s` (or, without it,
/// `ios_per_s`) over the cycle, or the clone stops and the job fails (fio 3.33's
/// `check_min_rate`). Index 0 is reads, 1 writes; 0 is no minimum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateMin {
    /// `rate_min`, per direction.
    pub bytes_per_s: [u64; 2],
    /// `rate_iops_min`, per direction (used where `bytes_per_s` is 0).
    pub ios_per_s: [u64; 2],
    /// `rate_cycle` (fio's default 1000 ms).
    pub cycle_ns: u64,
}

/// Formats the job back into command-line words (a job list that parses to the same job).
impl fmt::Display for JobSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "job={} rw={}", self.name, self.rw.as_str())?;
        if self.rw.is_mixed() {
            write!(f, " rwmixread={}", self.rwmixread)?;
        }
        write!(f, " bs={} iodepth={} cpus={}", self.bs, self.iodepth, self.cpus)?;
        if let Some(runtime) = self.runtime_ns {
            if runtime % 1_000_000 == 0 {
                write!(f, " runtime={}ms", runtime / 1_000_000)?;
            } else {
                write!(f, " runtime={}us", runtime / 1_000)?;
            }
        }
        if let Some(size) = self.size {
            write!(f, " size={size}")?;
        }
        write!(f, " offset={}", self.offset)?;
        if let Some(device) = &self.device {
            write!(f, " device={device}")?;
        }
        write!(f, " verify={}", self.verify.as_str())?;
        if self.verify.is_enabled() && !self.rw.writes() {
            write!(f, " verify_generation={}", self.verify_generation)?;
        }
        if let Some(completion) = self.completion {
            write!(f, " completion={}", completion.as_str())?;
        }
        if let Some(quiesce) = self.quiesce {
            write!(f, " quiesce={}", quiesce.as_str())?;
        }
        write!(
            f,
            " seed={:#x} stop_on_error={} io_timeout={}ms",
            self.seed,
            u8::from(self.stop_on_error),
            self.io_timeout_ns / 1_000_000
        )?;
        if self.stop_on_error && self.continue_on != 0 {
            let names = [
                (ErrorClass::Read, "read"),
                (ErrorClass::Write, "write"),
                (ErrorClass::Verify, "verify"),
            ];
            let going_on: Vec<&str> = names
                .iter()
                .filter(|(class, _)| self.continue_on & *class as u8 != 0)
                .map(|(_, name)| *name)
                .collect();
            write!(f, " (going on after {} errors)", going_on.join("+"))?;
        }
        if self.trace_every != 0 {
            write!(f, " trace={}", self.trace_every)?;
        }
        if self.destroy {
            write!(f, " destroy=1")?;
        }
        Ok(())
    }
}

/// Parses the job words of a kernel command line (see the module docs for the `--` rule).
pub fn parse_cmdline(cmdline: &str) -> Result<Vec<JobSpec>, WorkloadError> {
    let mut words = cmdline.split_ascii_whitespace();
    if cmdline.split_ascii_whitespace().any(|w| w == "--") {
        for word in words.by_ref() {
            if word == "--" {
                break;
            }
        }
    }
    parse_jobs(words)
}

/// Parses job words into jobs (see the module docs for the syntax). An empty input gives no jobs.
pub fn parse_jobs<'a>(words: impl IntoIterator<Item = &'a str>) -> Result<Vec<JobSpec>, WorkloadError> {
    let mut globals = SectionBuilder::new("global", JobSpec::with_defaults("job0"));
    let mut jobs: Vec<SectionBuilder> = Vec::new();
    for word in words {
        let (key, value) = word
            .split_once('=')
            .ok_or_else(|| WorkloadError::MalformedWord { word: word.to_string() })?;
        let key = Key::lookup(key)?;
        if value.is_empty() {
            return Err(WorkloadError::MissingValue { key: key.name() });
        }
        if key == Key::Job {
            let name = parse_job_name(value)?;
            if jobs.iter().any(|j| j.spec.name == name) {
                return Err(WorkloadError::DuplicateJobName { name: name.to_string() });
            }
            let mut spec = globals.spec.clone();
            spec.name = name.to_string();
            let mut section = SectionBuilder::new(name, spec);
            // Keys set globally count for the conflict checks of every job.
            section.inherited = globals.set_here;
            jobs.push(section);
            continue;
        }
        let section = jobs.last_mut().unwrap_or(&mut globals);
        section.apply(key, value)?;
    }
    if jobs.is_empty() {
        if globals.set_here == 0 {
            return Ok(Vec::new());
        }
        jobs.push(globals);
    }
    jobs.into_iter().map(SectionBuilder::finish).collect()
}

fn parse_job_name(value: &str) -> Result<&str, WorkloadError> {
    let valid = value.len() <= MAX_JOB_NAME
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if valid {
        Ok(value)
    } else {
        Err(WorkloadError::MalformedValue {
            key: "job",
            value: value.to_string(),
            expected: format!("a name of 1 to {MAX_JOB_NAME} characters from A-Z a-z 0-9 _ - ."),
        })
    }
}

/// One key of [`ACCEPTED_KEYS`]; the discriminant doubles as the bit index in a section's "set here" mask.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Key {
    Job,
    Rw,
    RwMixRead,
    RwMixWrite,
    Bs,
    IoDepth,
    Cpus,
    Runtime,
    Size,
    Offset,
    Device,
    Verify,
    VerifyGeneration,
    Completion,
    Quiesce,
    Seed,
    StopOnError,
    IoTimeout,
    Trace,
    Destroy,
}

impl Key {
    const ALL: [Key; 20] = [
        Key::Job,
        Key::Rw,
        Key::RwMixRead,
        Key::RwMixWrite,
        Key::Bs,
        Key::IoDepth,
        Key::Cpus,
        Key::Runtime,
        Key::Size,
        Key::Offset,
        Key::Device,
        Key::Verify,
        Key::VerifyGeneration,
        Key::Completion,
        Key::Quiesce,
        Key::Seed,
        Key::StopOnError,
        Key::IoTimeout,
        Key::Trace,
        Key::Destroy,
    ];

    fn name(self) -> &'static str {
        ACCEPTED_KEYS[self as usize]
    }

    fn bit(self) -> u32 {
        1 << (self as u32)
    }

    fn lookup(text: &str) -> Result<Self, WorkloadError> {
        Self::ALL
            .iter()
            .copied()
            .find(|k| k.name() == text)
            .ok_or_else(|| WorkloadError::UnknownKey { key: text.to_string() })
    }
}

struct SectionBuilder {
    section: String,
    spec: JobSpec,
    /// Keys set in this section (one bit per [`Key`]).
    set_here: u32,
    /// Keys set in the global section, for a job section.
    inherited: u32,
}

impl SectionBuilder {
    fn new(section: &str, spec: JobSpec) -> Self {
        Self {
            section: section.to_string(),
            spec,
            set_here: 0,
            inherited: 0,
        }
    }

    fn apply(&mut self, key: Key, value: &str) -> Result<(), WorkloadError> {
        if self.set_here & key.bit() != 0 {
            return Err(WorkloadError::DuplicateKey {
                key: key.name(),
                section: self.section.clone(),
            });
        }
        self.set_here |= key.bit();
        let bad = |expected: &str| WorkloadError::MalformedValue {
            key: key.name(),
            value: value.to_string(),
            expected: expected.to_string(),
        };
        let spec = &mut self.spec;
        match key {
            Key::Job => unreachable!("job= starts a section and is handled by parse_jobs"),
            Key::Rw => {
                spec.rw = RwMode::from_name(value).ok_or_else(|| {
                    bad("one of read, write, randread, randwrite, randrw, rw, trim, randtrim, trimwrite, randtrimwrite")
                })?;
            }
            Key::RwMixRead | Key::RwMixWrite => {
                let percent = parse_u64(value)
                    .filter(|&p| p <= 100)
                    .ok_or_else(|| bad("a percentage from 0 to 100"))?;
                // In range 0..=100, checked above.
                let percent = percent as u8;
                spec.rwmixread = if key == Key::RwMixRead { percent } else { 100 - percent };
            }
            Key::Bs => {
                let bs = parse_size(value)
                    .filter(|&bs| bs > 0 && bs <= MAX_BS)
                    .ok_or_else(|| bad(&format!("{SIZE_FORM}, from 1 to {MAX_BS}")))?;
                // At most MAX_BS, which fits in u32.
                spec.bs = bs as u32;
            }
            Key::IoDepth => {
                let depth = parse_u64(value)
                    .filter(|&d| (1..=MAX_IODEPTH).contains(&d))
                    .ok_or_else(|| bad(&format!("an integer from 1 to {MAX_IODEPTH}")))?;
                // At most MAX_IODEPTH, which fits in u32.
                spec.iodepth = depth as u32;
            }
            Key::Cpus => {
                spec.cpus = if value == "all" {
                    CpuSelection::All
                } else {
                    let set = CpuSet::parse(value).ok_or_else(|| bad(CPU_LIST_FORM))?;
                    CpuSelection::List(set)
                };
            }
            Key::Runtime => {
                let runtime = parse_duration_ns(value)
                    .filter(|&ns| ns > 0)
                    .ok_or_else(|| bad(&format!("{DURATION_FORM}, above zero")))?;
                spec.runtime_ns = Some(runtime);
            }
            Key::Size => {
                let size = parse_size(value)
                    .filter(|&s| s > 0)
                    .ok_or_else(|| bad(&format!("{SIZE_FORM}, above zero")))?;
                spec.size = Some(size);
            }
            Key::Offset => spec.offset = parse_size(value).ok_or_else(|| bad(SIZE_FORM))?,
            Key::Device => {
                let valid = value.len() <= 32 && value.bytes().all(|b| b.is_ascii_graphic());
                if !valid {
                    return Err(bad("a device name of at most 32 printable characters"));
                }
                spec.device = Some(value.to_string());
            }
            Key::Verify => {
                spec.verify = match value {
                    "crc32c" => VerifyMode::Crc32c,
                    "pattern" => VerifyMode::Pattern,
                    "none" => VerifyMode::None,
                    _ => return Err(bad("one of crc32c, pattern, none")),
                }
            }
            Key::VerifyGeneration => {
                spec.verify_generation = if value == "any" {
                    ExpectedGeneration::Any
                } else {
                    let generation = parse_u64(value)
                        .filter(|&g| g >= 1 && g <= u64::from(crate::verify::MAX_GENERATION))
                        .ok_or_else(|| {
                            bad(&format!(
                                "any, or a generation from 1 to {}",
                                crate::verify::MAX_GENERATION
                            ))
                        })?;
                    // At most MAX_GENERATION, which fits in u32.
                    ExpectedGeneration::Exact(generation as u32)
                };
            }
            Key::Completion => {
                spec.completion = Some(match value {
                    "irq" => CompletionPolicy::Irq,
                    "local" => CompletionPolicy::Local,
                    "remote" => CompletionPolicy::Remote,
                    "poll" => CompletionPolicy::Poll,
                    _ => return Err(bad("one of irq, local, remote, poll")),
                })
            }
            Key::Quiesce => {
                spec.quiesce = Some(match value {
                    "lockfree" => QuiescePolicy::LockFree,
                    "locked" => QuiescePolicy::Locked,
                    "sleeping" => QuiescePolicy::Sleeping,
                    _ => return Err(bad("one of lockfree, locked, sleeping")),
                })
            }
            Key::Seed => {
                spec.seed = parse_u64_any_radix(value).ok_or_else(|| bad("an integer, decimal or 0x hexadecimal"))?
            }
            Key::StopOnError => spec.stop_on_error = parse_bool(value).ok_or_else(|| bad(BOOL_FORM))?,
            Key::Destroy => spec.destroy = parse_bool(value).ok_or_else(|| bad(BOOL_FORM))?,
            Key::IoTimeout => {
                spec.io_timeout_ns = parse_duration_ns(value)
                    .filter(|&ns| ns > 0)
                    .ok_or_else(|| bad(&format!("{DURATION_FORM}, above zero")))?
            }
            Key::Trace => {
                spec.trace_every = match value {
                    "off" => 0,
                    _ => value
                        .parse::<u32>()
                        .ok()
                        .filter(|n| *n <= MAX_TRACE_EVERY)
                        .ok_or_else(|| {
                            bad(&format!(
                                "off, or N from 0 (off) to {MAX_TRACE_EVERY}: trace 1 in N requests"
                            ))
                        })?,
                }
            }
        }
        Ok(())
    }

    /// Checks the combination of keys and returns the finished job.
    fn finish(self) -> Result<JobSpec, WorkloadError> {
        let set = self.set_here | self.inherited;
        let has = |key: Key| set & key.bit() != 0;
        let spec = self.spec;
        let conflict = |first: Key, second: Key, reason: &'static str| WorkloadError::ConflictingKeys {
            job: spec.name.clone(),
            first: first.name(),
            second: second.name(),
            reason,
        };
        if has(Key::RwMixRead) && has(Key::RwMixWrite) {
            // `apply` stored whichever came last; both must describe the same mix.
            return Err(conflict(
                Key::RwMixRead,
                Key::RwMixWrite,
                "give only one of them (rwmixwrite is 100 - rwmixread)",
            ));
        }
        for mix_key in [Key::RwMixRead, Key::RwMixWrite] {
            if has(mix_key) && !spec.rw.is_mixed() {
                return Err(conflict(mix_key, Key::Rw, "a read/write mix needs rw=randrw or rw=rw"));
            }
        }
        if has(Key::VerifyGeneration) {
            if !spec.verify.is_enabled() {
                return Err(conflict(
                    Key::VerifyGeneration,
                    Key::Verify,
                    "it needs verify=crc32c or verify=pattern",
                ));
            }
            if spec.rw.writes() {
                return Err(conflict(
                    Key::VerifyGeneration,
                    Key::Rw,
                    "it applies to read-only verify jobs; jobs that write track generations themselves",
                ));
            }
        }
        Ok(spec)
    }
}

#[cfg(test)]
mod tests;
