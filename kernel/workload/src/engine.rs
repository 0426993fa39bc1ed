//! The per-CPU engine loop, generic over an [`IoBackend`] that the kernel implements on top of its
//! block layer (and tests implement in memory).
//!
//! Each submitting CPU calls [`run_cpu`] with its own backend. The loop keeps `iodepth` requests in
//! flight, stamps write buffers and checks read buffers when the job verifies, records completion
//! latencies in per-CPU histograms, and counts errors on exactly the I/Os that failed. It stops at the
//! runtime, after its share of `size`, or when [`JobShared::request_stop`] is called, drains what is in
//! flight, and (for verify jobs that wrote) reads back and checks every block it wrote.
//!
//! Everything the loop needs is allocated when it starts; submitting and reaping never allocate.
//! CPUs share nothing but the [`JobShared`] counters they publish for the progress line, each written
//! by one CPU only.

use alloc::boxed::Box;
use alloc::collections::VecDeque;
use alloc::vec;
use alloc::vec::Vec;
use core::fmt;
use core::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};

use crate::detail::{CpuDetail, DetailOptions, Mark, Totals, batch_bucket, depth_bucket};
use crate::error::WorkloadError;
use crate::fileset::FileSetGenerator;
use crate::generator::IoGenerator;
use crate::hist::LatencyHistogram;
use crate::job::{ExpectedGeneration, VerifyMode};
use crate::plan::{CpuSlice, JobPlan, VerifyScheme};
use crate::poisson::PoissonArrivals;
use crate::ratelimit::{RateLimit, Verdict};
use crate::rng::mix64;
use crate::verify::{BlockStamp, HEADER_LEN, MAX_GENERATION, VerifyMismatch, check_stamped, fill_block, stamp_block};

/// Per CPU (and per job report), at most this many failed I/Os are kept with their address, and as
/// many retried ones; all are counted.
pub const MAX_ERROR_RECORDS: usize = 16;
/// Per CPU, the engine logs at most this many per-I/O lines (failed or retried I/Os) at once ...
pub const LOG_BURST: u32 = 8;
/// ... and then at most one per this interval (1 s), counting the lines it holds back.
pub const LOG_INTERVAL_NS: u64 = 1_000_000_000;
/// Per CPU, up to this many I/Os (and [`DEFERRED_PER_SLOT`] per slot beyond) whose block is in flight
/// wait in a queue while other I/Os are issued.
pub const MIN_DEFERRED: usize = 256;
/// See [`MIN_DEFERRED`].
pub const DEFERRED_PER_SLOT: usize = 4;
/// The engine calls [`IoBackend::periodic`] about this often (100 ms).
pub const PERIODIC_INTERVAL_NS: u64 = 100_000_000;

/// Direction of one I/O.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoOp {
    /// Device to memory.
    Read,
    /// Memory to device.
    Write,
    /// Flush the device's volatile write cache (no data; `lba` and `sectors` are 0). Only jobs
    /// with fio's `fsync`/`end_fsync` issue it.
    Flush,
    /// Discard (fio's trim): the block's range, no data moves (`rw=trim`, `randtrim`,
    /// `trimwrite`).
    Trim,
}

impl IoOp {
    /// `read`, `write`, `flush` or `trim`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Write => "write",
            Self::Flush => "flush",
            Self::Trim => "trim",
        }
    }
}

/// Why one I/O failed, as the backend reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoError {
    /// The device completed the request with an error status (driver-specific code).
    Device {
        /// The status code.
        status: u32,
    },
    /// The block layer timed the request out.
    Timeout,
    /// The request was aborted (by an abort command, or at shutdown).
    Aborted,
    /// The controller was reset while the request was in flight, and the driver failed it.
    Reset,
    /// The block layer refused the request (e.g. out of range, queue dying), with its own code.
    Rejected {
        /// The block layer's code.
        code: u32,
    },
}

impl fmt::Display for IoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Device { status } => write!(f, "device status {status:#x}"),
            Self::Timeout => f.write_str("timeout"),
            Self::Aborted => f.write_str("aborted"),
            Self::Reset => f.write_str("failed by a controller reset"),
            Self::Rejected { code } => write!(f, "rejected (code {code})"),
        }
    }
}

impl IoError {
    /// A short machine-readable name of the kind: `device`, `timeout`, `aborted`, `reset`, `rejected`.
    pub const fn key(&self) -> &'static str {
        match self {
            Self::Device { .. } => "device",
            Self::Timeout => "timeout",
            Self::Aborted => "aborted",
            Self::Reset => "reset",
            Self::Rejected { .. } => "rejected",
        }
    }
}

/// Why [`IoBackend::submit`] did not start a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubmitError {
    /// No resources right now (tags, queue slots); the engine retries the same I/O later.
    Busy,
    /// The request failed at once; the engine counts it as an I/O that completed with this error.
    Failed(IoError),
}

/// One finished request, as reported by [`IoBackend::poll_completions`]. Build it with
/// [`Completion::new`] (and [`Completion::with_retries`] when the driver re-issued the request).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    /// The slot passed to `submit`.
    pub slot: usize,
    /// Its outcome.
    pub result: Result<(), IoError>,
    /// How many times the driver re-issued the request before this outcome (after a timeout and
    /// abort, or a controller reset); 0 when the first attempt gave the outcome. Retried I/Os are
    /// counted and listed in the report whatever their outcome.
    pub retries: u32,
}

impl Completion {
    /// A placeholder for preallocated completion arrays.
    pub const EMPTY: Self = Self::new(usize::MAX, Ok(()));

    /// A request of `slot` finished with `result` on its first attempt.
    pub const fn new(slot: usize, result: Result<(), IoError>) -> Self {
        Self {
            slot,
            result,
            retries: 0,
        }
    }

    /// The same completion, after `retries` re-issues by the driver.
    #[must_use]
    pub const fn with_retries(mut self, retries: u32) -> Self {
        self.retries = retries;
        self
    }
}

/// What one [`IoBackend::poll_reaped`] found: the common case as a bit mask, the rest listed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Reaped {
    /// Bit `s` set: slot `s` (below 64) completed successfully on its first attempt, as
    /// `Completion::new(s, Ok(()))` in `out` would say.
    pub succeeded: u64,
    /// How many completions were written to the front of `out` (every other one).
    pub listed: usize,
}

impl Reaped {
    /// The completions found, both kinds.
    pub const fn count(&self) -> usize {
        self.succeeded.count_ones() as usize + self.listed
    }
}

/// Splits a success mask into its `n` lowest slots and the rest, for a backend that hands a
/// reap out in parts (a later [`IoBackend::poll_reaped`] returns the rest): `n` or fewer bits
/// (all of them when `mask` has at most `n`), then what remains. `n` = 0 takes nothing.
pub const fn split_successes(mask: u64, n: usize) -> (u64, u64) {
    let mut rest = mask;
    let mut taken = 0;
    while taken < n && rest != 0 {
        rest &= rest - 1;
        taken += 1;
    }
    (mask & !rest, rest)
}

/// What the engine needs from the block layer on one CPU.
///
/// The engine uses slots `0..iodepth`; a slot has at most one request in flight. Buffers belong to
/// the backend (so it can hand out DMA-able memory) and must stay valid while their slot is in flight.
pub trait IoBackend {
    /// The data buffer of `slot`, at least `bs` bytes long (the engine uses the first `bs` bytes).
    /// The engine fills it before a write and reads it after a read completes; it never touches the
    /// buffer of a slot in flight.
    fn slot_buffer(&mut self, slot: usize) -> &mut [u8];

    /// Starts a request: `sectors` sectors at `lba`, between the device and `slot`'s buffer.
    fn submit(&mut self, slot: usize, op: IoOp, lba: u64, sectors: u32) -> Result<(), SubmitError>;

    /// Writes finished requests into `out` and returns how many it wrote (at most `out.len()`;
    /// larger returns are clamped). Requests not reported now must be reported by a later call.
    fn poll_completions(&mut self, out: &mut [Completion]) -> usize;

    /// What [`IoBackend::poll_completions`] reports, with the common case apart: each request
    /// of a slot below 64 that succeeded on its first attempt may come back as a bit of
    /// [`Reaped::succeeded`] instead of a [`Completion`] in `out`; the rest go to `out` as
    /// `poll_completions` writes them (at most `out.len()`; the others by a later call). The
    /// engine reaps through this. The default lists everything; a backend whose completions
    /// arrive as bit maps (the kernel's done board) saves a [`Completion`] written and read
    /// back per I/O.
    fn poll_reaped(&mut self, out: &mut [Completion]) -> Reaped {
        Reaped {
            succeeded: 0,
            listed: self.poll_completions(out),
        }
    }

    /// A monotonic clock in nanoseconds.
    fn now_ns(&self) -> u64;

    /// Called when a poll found nothing to reap; a kernel may pause or wait for an interrupt here.
    /// `in_flight`: the engine's requests submitted and not yet reported by a poll (with 0,
    /// no completion of this CPU's is on its way to wake a waiting CPU). The engine counts them
    /// anyway, so a backend need not count them again per I/O.
    fn idle(&mut self, _in_flight: usize) {}

    /// Called from the loop about every [`PERIODIC_INTERVAL_NS`], with the current clock. The CPU that
    /// also prints progress can write a [`ProgressMeter`](crate::ProgressMeter) line here once a second,
    /// since it is busy in the engine loop itself.
    fn periodic(&mut self, _now_ns: u64) {}

    /// Prints one diagnostic line of the engine (no trailing newline), e.g. a failed or retried I/O.
    /// The engine rate-limits these per CPU ([`LOG_BURST`], [`LOG_INTERVAL_NS`]) and says how many it
    /// held back, so a kernel can print them straight to its console. The default drops them (the
    /// job report still lists the I/Os).
    fn log_line(&mut self, _line: fmt::Arguments<'_>) {}
}

/// Which part of the job a CPU is in, as published for the progress line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CpuPhase {
    /// Not started yet.
    Starting,
    /// The measured phase.
    Running,
    /// Reading back and checking what was written.
    Verifying,
    /// Done; its counters are final.
    Finished,
}

impl CpuPhase {
    fn from_u8(value: u8) -> Self {
        match value {
            1 => Self::Running,
            2 => Self::Verifying,
            3 => Self::Finished,
            _ => Self::Starting,
        }
    }
}

/// Counters one CPU publishes while it runs, for the progress line: about every
/// [`PERIODIC_INTERVAL_NS`], when a phase ends, and when the CPU finishes. Each field has one writer
/// (the CPU running the engine) and any number of readers.
#[derive(Debug, Default)]
#[repr(align(64))]
pub struct CpuLive {
    ios: AtomicU64,
    bytes: AtomicU64,
    errors: AtomicU64,
    mismatches: AtomicU64,
    phase: AtomicU8,
}

/// A consistent-enough reading of one CPU's live counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LiveCounts {
    /// Completed I/Os (including failed ones and those of the verify pass).
    pub ios: u64,
    /// Bytes moved by successful I/Os.
    pub bytes: u64,
    /// Failed I/Os.
    pub errors: u64,
    /// Verify mismatches.
    pub mismatches: u64,
}

impl LiveCounts {
    /// Field-wise sum.
    pub fn add(&mut self, other: &Self) {
        self.ios += other.ios;
        self.bytes += other.bytes;
        self.errors += other.errors;
        self.mismatches += other.mismatches;
    }
}

impl CpuLive {
    fn publish(&self, counts: &LiveCounts) {
        // Relaxed: plain statistics for display, with no data published through them. The final
        // values are ordered before `finish`'s Release store of the phase.
        self.ios.store(counts.ios, Ordering::Relaxed);
        self.bytes.store(counts.bytes, Ordering::Relaxed);
        self.errors.store(counts.errors, Ordering::Relaxed);
        self.mismatches.store(counts.mismatches, Ordering::Relaxed);
    }

    fn set_phase(&self, phase: CpuPhase) {
        // Release pairs with the Acquire load in `phase()`: a reader that sees `Finished` also sees
        // the last `publish`.
        self.phase.store(phase as u8, Ordering::Release);
    }

    /// The CPU's current phase.
    pub fn phase(&self) -> CpuPhase {
        // Acquire pairs with the Release store in `set_phase`.
        CpuPhase::from_u8(self.phase.load(Ordering::Acquire))
    }

    /// The CPU's latest published counters.
    pub fn counts(&self) -> LiveCounts {
        // Relaxed: see `publish`; exact once `phase()` has returned `Finished`.
        LiveCounts {
            ios: self.ios.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            mismatches: self.mismatches.load(Ordering::Relaxed),
        }
    }
}

/// State shared by all CPUs of one job: a stop flag and the live counters. Create one per job with
/// [`JobShared::new`] and hand a reference to every CPU.
#[derive(Debug)]
pub struct JobShared {
    stop: AtomicBool,
    live: Box<[CpuLive]>,
    detail: Option<DetailOptions>,
}

impl JobShared {
    /// Shared state for a job with `plan.cpus.len()` CPUs.
    pub fn new(plan: &JobPlan) -> Self {
        let live = (0..plan.cpus.len()).map(|_| CpuLive::default()).collect();
        Self {
            stop: AtomicBool::new(false),
            live,
            detail: None,
        }
    }

    /// Shared state for a job whose CPUs also measure the detail fio's output needs
    /// ([`crate::detail`]: slat/clat, depths, idle time, interval samples, log windows).
    pub fn with_detail(plan: &JobPlan, options: DetailOptions) -> Self {
        Self {
            detail: Some(options),
            ..Self::new(plan)
        }
    }

    /// The detail options, if the job measures detail.
    pub fn detail(&self) -> Option<DetailOptions> {
        self.detail
    }

    /// Asks every CPU to stop issuing I/O, drain, and return (skipping the verify pass).
    pub fn request_stop(&self) {
        // Relaxed: a hint polled in the loop; the only thing it orders is "stop soon".
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Whether a stop was requested.
    pub fn stop_requested(&self) -> bool {
        // Relaxed: see `request_stop`.
        self.stop.load(Ordering::Relaxed)
    }

    /// Live counters of the CPU at `cpu_index` in the plan.
    pub fn cpu(&self, cpu_index: usize) -> Option<&CpuLive> {
        self.live.get(cpu_index)
    }

    /// Sum of every CPU's live counters.
    pub fn total(&self) -> LiveCounts {
        let mut total = LiveCounts::default();
        for cpu in self.live.iter() {
            total.add(&cpu.counts());
        }
        total
    }

    /// Whether every CPU has finished.
    pub fn all_finished(&self) -> bool {
        self.live.iter().all(|cpu| cpu.phase() == CpuPhase::Finished)
    }

    /// Whether any CPU is in its verify pass.
    pub fn any_verifying(&self) -> bool {
        self.live.iter().any(|cpu| cpu.phase() == CpuPhase::Verifying)
    }
}

/// Counts and latencies of one direction in the measured phase.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpStats {
    /// Completed I/Os, failed ones included.
    pub ios: u64,
    /// Bytes moved by successful I/Os.
    pub bytes: u64,
    /// Failed I/Os.
    pub errors: u64,
    /// Submit-to-completion latency of successful I/Os, in ns.
    pub latency: LatencyHistogram,
}

impl OpStats {
    fn new() -> Self {
        Self {
            ios: 0,
            bytes: 0,
            errors: 0,
            latency: LatencyHistogram::new(),
        }
    }
}

/// Verify outcome on one CPU (both phases).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VerifyStats {
    /// Blocks read and found correct.
    pub checked: u64,
    /// Blocks read whose content was not known (not yet written in this job, last write failed, or
    /// the read itself failed).
    pub unchecked: u64,
    /// Blocks the verify pass did not read because their last write failed.
    pub skipped: u64,
    /// Blocks read that did not match.
    pub mismatches: u64,
    /// The first mismatch, with the clock value when it was found.
    pub first_mismatch: Option<(u64, VerifyMismatch)>,
    /// Reads issued by the verify pass (after the measured phase).
    pub pass_reads: u64,
    /// How long the verify pass took, in ns.
    pub pass_ns: u64,
    /// Whether the verify pass was skipped because the job was stopped.
    pub pass_skipped: bool,
}

/// One failed or retried I/O, kept with its address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IoRecord {
    /// Clock value at completion.
    pub at_ns: u64,
    /// Direction.
    pub op: IoOp,
    /// First sector.
    pub lba: u64,
    /// Length in sectors.
    pub sectors: u32,
    /// The outcome: an error, or `Ok` for an I/O that succeeded after the driver retried it.
    pub result: Result<(), IoError>,
    /// How many times the driver re-issued it (see [`Completion::retries`]).
    pub retries: u32,
    /// Whether it happened in the verify pass.
    pub in_verify_pass: bool,
}

/// The former name of [`IoRecord`].
pub type IoErrorRecord = IoRecord;

impl IoRecord {
    /// The error, if the I/O failed.
    pub fn error(&self) -> Option<IoError> {
        self.result.err()
    }

    /// The outcome in words: the error, or `ok`, and `after N retries` when there were any.
    pub fn status(&self) -> RecordStatus<'_> {
        RecordStatus(self)
    }
}

/// See [`IoRecord::status`].
#[derive(Debug, Clone, Copy)]
pub struct RecordStatus<'a>(&'a IoRecord);

impl fmt::Display for RecordStatus<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.result {
            Ok(()) => f.write_str("ok")?,
            Err(error) => write!(f, "{error}")?,
        }
        match self.0.retries {
            0 => Ok(()),
            1 => f.write_str(" after 1 retry"),
            n => write!(f, " after {n} retries"),
        }
    }
}

impl fmt::Display for IoRecord {
    /// E.g. `read LBA 2048 +8 sectors: timeout after 1 retry (verify pass)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} LBA {} +{} sectors: {}{}",
            self.op.as_str(),
            self.lba,
            self.sectors,
            self.status(),
            if self.in_verify_pass { " (verify pass)" } else { "" }
        )
    }
}

/// Everything one CPU measured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuResult {
    /// The CPU number.
    pub cpu: u32,
    /// Reads of the measured phase.
    pub read: OpStats,
    /// Writes of the measured phase.
    pub write: OpStats,
    /// Trims (discards) of the measured phase.
    pub trim: OpStats,
    /// Length of the measured phase: first submit to last completion, in ns.
    pub runtime_ns: u64,
    /// Verify outcome.
    pub verify: VerifyStats,
    /// Failed I/Os in both phases (the measured phase's are also in `read`/`write`).
    pub errors: u64,
    /// The first [`MAX_ERROR_RECORDS`] failed I/Os (retried or not).
    pub error_records: Vec<IoRecord>,
    /// I/Os the driver re-issued at least once, whatever their outcome, in both phases.
    pub retried: u64,
    /// The first [`MAX_ERROR_RECORDS`] retried I/Os (a retried I/O that failed is also in
    /// `error_records`).
    pub retried_records: Vec<IoRecord>,
    /// I/Os that waited because their block was in flight while other I/Os were issued (verify
    /// jobs that track generations only).
    pub deferred_ios: u64,
    /// I/Os of a time-based job not issued because their block was in flight and the deferral
    /// queue was full (a block held for a long time); the generator's next I/O went instead.
    pub dropped_busy_ios: u64,
    /// Per-I/O log lines held back by the rate limit.
    pub log_lines_suppressed: u64,
    /// Whether the CPU stopped because a stop was requested (by the kernel or by `stop_on_error`).
    pub stopped_early: bool,
    /// What the detail mode measured ([`JobShared::with_detail`]), if it was on.
    pub detail: Option<Box<CpuDetail>>,
    /// Cache flushes (fio's `fsync`, `end_fsync`): count, failures (also in `errors`) and
    /// latency; `bytes` stays 0.
    pub flush: OpStats,
}

impl CpuResult {
    /// Completed I/Os of the measured phase.
    pub fn ios(&self) -> u64 {
        self.read.ios + self.write.ios + self.trim.ios
    }
}

/// Runs the job's share of CPU `cpu_index` (an index into `plan.cpus`) through `backend`, publishing
/// progress in `shared`. Returns the CPU's measurements, or an error if the backend misbehaves
/// (a bogus completion, a buffer too small) or stalls for longer than the job's `io_timeout`.
pub fn run_cpu<B: IoBackend + ?Sized>(
    plan: &JobPlan,
    cpu_index: usize,
    backend: &mut B,
    shared: &JobShared,
) -> Result<CpuResult, WorkloadError> {
    let slice = *plan.cpus.get(cpu_index).ok_or(WorkloadError::CpuIndexOutOfRange {
        index: cpu_index,
        cpus: plan.cpus.len(),
    })?;
    let live = shared.cpu(cpu_index).ok_or(WorkloadError::CpuIndexOutOfRange {
        index: cpu_index,
        cpus: shared.live.len(),
    })?;
    if is_plain(plan, shared) {
        run_shaped::<B, true>(plan, slice, cpu_index, backend, shared, live)
    } else {
        run_shaped::<B, false>(plan, slice, cpu_index, backend, shared, live)
    }
}

/// Whether the job is the benchmark's plain shape: no verify, no pacing (`rate`, `thinktime`,
/// fsync), no detail, no ramp. Such a job runs the loop compiled with `PLAIN` set, in which every per-I/O
/// look at those features is a constant and drops out.
fn is_plain(plan: &JobPlan, shared: &JobShared) -> bool {
    matches!(plan.verify, VerifyScheme::Off)
        && !plan.spec.is_paced()
        && shared.detail.is_none()
        && plan.spec.ramp_ns == 0
}

/// [`run_cpu`] for one shape of job (see [`is_plain`]).
fn run_shaped<B: IoBackend + ?Sized, const PLAIN: bool>(
    plan: &JobPlan,
    slice: CpuSlice,
    cpu_index: usize,
    backend: &mut B,
    shared: &JobShared,
    live: &CpuLive,
) -> Result<CpuResult, WorkloadError> {
    let mut run = CpuRun::<B, PLAIN>::new(plan, slice, backend, shared, live)?;
    live.set_phase(CpuPhase::Running);
    let outcome = run.run_all(cpu_index);
    run.live.publish(&run.live_counts());
    live.set_phase(CpuPhase::Finished);
    outcome?;
    Ok(run.result)
}

/// fio's `rate_process=poisson`: one gap generator per direction, seeded from the job's seed,
/// the CPU and the direction, so a run repeats with the same seed (fio's `randrepeat`).
fn poisson_arrivals(plan: &JobPlan, cpu: u32) -> Option<Box<[PoissonArrivals; 2]>> {
    (plan.spec.rate_poisson && plan.spec.io_interval_ns != [0, 0]).then(|| {
        let seed = plan.spec.seed ^ mix64(u64::from(cpu) + 1);
        Box::new([PoissonArrivals::new(seed), PoissonArrivals::new(mix64(seed))])
    })
}

/// Blocks one CPU keeps for `verify_backlog` (0 when the job has no backlog).
/// The main phase's stream of I/Os for CPU `cpu_index`: the same every time for one plan (its
/// draws are seeded), which lets the verify pass of a single write pass draw it again.
fn main_source(plan: &JobPlan, cpu_index: usize) -> Source {
    if !plan.files.is_empty() {
        Source::Files(Box::new(FileSetGenerator::new(plan, cpu_index)))
    } else if plan.spec.bs_mix.is_some() {
        Source::Sized(IoGenerator::new(plan, cpu_index))
    } else {
        Source::Main(IoGenerator::new(plan, cpu_index))
    }
}

fn backlog_capacity(plan: &JobPlan) -> usize {
    if plan.verify.has_verify_pass() {
        plan.spec.verify_backlog as usize
    } else {
        0
    }
}

/// Failed writes a single-pass verify job remembers per CPU (the verify pass skips their blocks);
/// past this many, it reads every written block unchecked.
pub const MAX_FAILED_WRITES: usize = 4096;

/// Generation word flags in the tracker: the low 30 bits are the block's generation.
const TRACK_BUSY: u32 = 1 << 31;
const TRACK_UNKNOWN: u32 = 1 << 30;
const TRACK_GENERATION: u32 = MAX_GENERATION;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Main,
    VerifyPass,
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    op: IoOp,
    /// Block index within the CPU's slice.
    block: u64,
    /// The I/O's bytes (`bs`, or with variable block sizes what was drawn for it).
    bytes: u32,
    /// For a write: the generation stamped. For a read: the generation expected, if known.
    generation: Option<ExpectedGeneration>,
    submitted_ns: u64,
    /// Clock just after `submit` returned (detail mode; `submitted_ns` otherwise).
    issued_ns: u64,
    /// While the slot is free: the next free slot ([`NO_SLOT`] ends the list); [`IN_FLIGHT`]
    /// while a request of it is in flight (one word for both: a store fewer per submission
    /// and per completion).
    next_free: u32,
}

impl Slot {
    fn in_flight(&self) -> bool {
        self.next_free == IN_FLIGHT
    }
}

/// Successes of the main phase with one direction and one latency, counted in its statistics
/// together (the histogram through [`LatencyHistogram::record_n`]): the I/Os of one submission burst share its clock
/// read, those of one reap theirs, so a burst reaped together is one run. Recorded
/// at the end of every reap, so between reaps the statistics are whole.
#[derive(Debug, Clone, Copy)]
struct LatencyRun {
    op: IoOp,
    latency_ns: u64,
    count: u64,
    /// The run's bytes (its I/Os' sizes may differ with variable block sizes).
    bytes: u64,
}

/// The end of the free-slot list.
const NO_SLOT: u32 = u32::MAX;
/// [`Slot::next_free`] of a slot in flight (no slot index: the depth is far below it).
const IN_FLIGHT: u32 = u32::MAX - 1;

enum Source {
    Main(IoGenerator),
    /// The main phase of a job with variable block sizes (`JobSpec::bs_mix`): a variant of its
    /// own, so that fixed-size jobs pay nothing per I/O for the size draw.
    Sized(IoGenerator),
    /// The main phase of a job over a `filename` list (`JobPlan::files`): the file service
    /// picks each I/O's file; a variant of its own, so one-device jobs pay nothing for it.
    Files(Box<FileSetGenerator>),
    /// No I/O (a phase that only issues a due flush).
    Nothing,
    /// The verify pass of a tracked job walks the slice in order (the tracker says which blocks
    /// hold a known generation).
    VerifyPass {
        next_block: u64,
    },
    /// The verify pass of a single write pass: the main phase's stream drawn again from its
    /// start, for exactly as many I/Os as the main phase issued, each read back block by block.
    /// A runtime cap, `io_size` or a stop can end the main phase anywhere in its stream, so the
    /// pass reads what was written and nothing past it.
    Replay(Box<Replay>),
}

/// [`Source::Replay`]'s state.
struct Replay {
    /// The main phase's stream, drawn again.
    stream: Source,
    /// Writes of the main phase not yet drawn again.
    writes_left: u64,
    /// The blocks of the write drawn last not yet read: `next_block..end_block`.
    next_block: u64,
    end_block: u64,
}

/// I/Os waiting for their block, which was in flight when they came up. Preallocated; never grows.
struct Deferred {
    queue: VecDeque<(IoOp, u64)>,
    capacity: usize,
    /// One bit per block of the slice: some queued I/O is for this block.
    queued: Vec<u64>,
    /// A block with queued I/Os completed since the last scan found nothing ready.
    maybe_ready: bool,
}

impl Deferred {
    fn new(capacity: usize, blocks: usize) -> Self {
        Self {
            queue: VecDeque::with_capacity(capacity),
            capacity,
            queued: if capacity == 0 {
                Vec::new()
            } else {
                vec![0; blocks.div_ceil(64)]
            },
            maybe_ready: false,
        }
    }

    fn clear(&mut self) {
        for &(_, block) in &self.queue {
            self.queued[(block / 64) as usize] = 0;
        }
        self.queue.clear();
        self.maybe_ready = false;
    }

    fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Whether nothing more may be queued (never true while empty, so jobs that do not track blocks
    /// and have no queue are never held up).
    fn is_full(&self) -> bool {
        !self.queue.is_empty() && self.queue.len() >= self.capacity
    }

    /// Queues `io`; the caller has checked that the queue is not full.
    fn push(&mut self, io: (IoOp, u64)) {
        debug_assert!(self.queue.len() < self.capacity);
        self.queued[(io.1 / 64) as usize] |= 1 << (io.1 % 64);
        self.queue.push_back(io);
    }

    /// Called when `block` stops being in flight.
    fn block_freed(&mut self, block: u64) {
        if let Some(word) = self.queued.get((block / 64) as usize)
            && word & (1 << (block % 64)) != 0
        {
            self.maybe_ready = true;
        }
    }

    /// The oldest queued I/O whose block is not in flight, if a block with queued I/Os completed
    /// since the last look. Keeps the order of I/Os to the same block.
    #[inline]
    fn take_ready(&mut self, tracker: &[u32]) -> Option<(IoOp, u64)> {
        if self.maybe_ready { self.scan(tracker) } else { None }
    }

    #[cold]
    fn scan(&mut self, tracker: &[u32]) -> Option<(IoOp, u64)> {
        let Some(index) = self
            .queue
            .iter()
            .position(|&(_, block)| tracker[block as usize] & TRACK_BUSY == 0)
        else {
            self.maybe_ready = false;
            return None;
        };
        let io = self.queue.remove(index)?;
        if !self.queue.iter().any(|&(_, block)| block == io.1) {
            self.queued[(io.1 / 64) as usize] &= !(1 << (io.1 % 64));
        }
        Some(io)
    }
}

/// Stamps every `bs`-byte block of `io` (one, or with variable block sizes several) with its own
/// header, the first at `stamp.lba`, each next `sectors_per_block` further, so any later read of
/// blocks can check each. Out of line: verify jobs only (see `check_read`).
#[inline(never)]
fn stamp_blocks(mode: VerifyMode, pattern: &[u8], stamp: BlockStamp, sectors_per_block: u64, bs: usize, io: &mut [u8]) {
    for (index, block) in io.chunks_exact_mut(bs).enumerate() {
        let lba = stamp.lba + index as u64 * sectors_per_block;
        stamp_block(mode, pattern, &BlockStamp { lba, ..stamp }, block);
    }
}

/// Clears the header of every `bs`-byte block of `io`, so a read that moves no data cannot pass
/// on a stale buffer.
#[inline(never)]
fn clear_headers(bs: usize, io: &mut [u8]) {
    for block in io.chunks_exact_mut(bs) {
        block[..HEADER_LEN.min(bs)].fill(0);
    }
}

/// One CPU's run of a job. `PLAIN`: the job has the shape [`is_plain`] names, so the features it
/// leaves out cost no instruction per I/O; every other job runs with `PLAIN` false, on the same code.
struct CpuRun<'a, B: ?Sized, const PLAIN: bool> {
    plan: &'a JobPlan,
    slice: CpuSlice,
    backend: &'a mut B,
    shared: &'a JobShared,
    live: &'a CpuLive,
    /// Block size: every I/O's, or with variable sizes the unit they are multiples of.
    bs: usize,
    /// The largest I/O in bytes, which every slot buffer holds (`bs` with a fixed size).
    buffer_bytes: usize,
    /// Sectors and bytes of the I/O being issued: `bs`'s, set once, or with variable block sizes
    /// what [`Source::Sized`] drew for it (a retry of the same I/O keeps them: nothing is drawn in
    /// between). Per-I/O fields rather than a multiply, so fixed-size jobs pay nothing.
    io_sectors: u32,
    io_bytes: u32,
    /// Device sector of block 0 of this CPU's slice (computed once: a division per I/O costs
    /// a helper call under emulation).
    first_lba: u64,
    /// `plan.sectors_per_block`, here to save a load through `plan` per I/O.
    sectors_per_block: u64,
    slots: Vec<Slot>,
    /// The free slots as a list through [`Slot::next_free`], most recently freed first: a push
    /// or a pop is a store or two in a slot the I/O touches anyway, with no capacity check.
    free_head: u32,
    in_flight: usize,
    completions: Vec<Completion>,
    /// The reap's run of equal latencies not yet recorded.
    latency_run: LatencyRun,
    /// Whether latencies are counted in runs: above iodepth 1 (at 1, every reap has one I/O, and
    /// recording it at once costs less than starting and ending its run).
    latency_runs: bool,
    /// Per-block generation words, for [`VerifyScheme::Tracked`] only.
    tracker: Vec<u32>,
    /// [`VerifyScheme::SinglePass`] only: blocks whose write failed (they may hold the old or the
    /// new data, so the verify pass skips them), at most [`MAX_FAILED_WRITES`]; past that,
    /// `failed_writes_overflow` leaves every block of the pass unchecked rather than guess.
    failed_writes: Vec<u64>,
    failed_writes_overflow: bool,
    /// An I/O the backend refused with `Busy`; it goes first once a request completes.
    retry: Option<(IoOp, u64)>,
    /// I/Os whose block was in flight when they came up, oldest first (tracked verify jobs only).
    /// Other I/Os are issued meanwhile, as fio does, so one slow block does not stall the CPU.
    deferred: Deferred,
    log_limit: RateLimit,
    last_progress_ns: u64,
    next_periodic_ns: u64,
    /// Detail mode: when the measured phase started, the next sample and log window are due, and
    /// the totals at the previous ones.
    detail_start_ns: u64,
    next_sample_ns: u64,
    next_window_ns: u64,
    sample_mark: Mark,
    window_mark: Mark,
    live_counts: LiveCounts,
    /// End of fio's `ramp_time` while it runs: at that time the statistics start afresh.
    ramp_end: Option<u64>,
    /// Pacing (`rate`, `rate_iops`, `thinktime`): whether any applies, so unpaced jobs skip it.
    paced: bool,
    /// Earliest start of the next I/O of each direction (`io_interval_ns`).
    next_io_ns: [u64; 2],
    /// `rate_poisson`: the exponential gaps of each direction (`None`: linear pacing).
    poisson: Option<Box<[PoissonArrivals; 2]>>,
    /// An unverified job that reads and writes: a write from a slot whose last I/O was a read
    /// gets fresh data first, so it never writes back what the read brought in (often zeros);
    /// fio's default `scramble_buffers` has the same aim.
    restamp_after_read: bool,
    /// `plan.verify` is [`VerifyScheme::Off`] / [`VerifyScheme::Tracked`]: asked on every I/O, so
    /// kept as flags (a match on the scheme costs about ten instructions).
    verify_off: bool,
    tracked: bool,
    /// I/Os issued since the last think time.
    issued_since_think: u32,
    /// End of the think time under way.
    think_until: Option<u64>,
    /// Writes issued since the last flush (`flush_every_writes`).
    writes_since_flush: u32,
    /// A flush is due: issue it once nothing is in flight.
    flush_wanted: bool,
    /// A flush is in flight: issue nothing else until it completes.
    flush_in_flight: bool,
    /// `verify_backlog`: blocks written since the last backlog check, and blocks due to be read
    /// back (preallocated; a full list drops the newest, which the verify pass still checks).
    backlog_written: Vec<u64>,
    backlog_pending: Vec<u64>,
    /// Writes submitted (accepted or failed at once), for the single write pass's verify pass,
    /// which reads back exactly these ([`Source::Replay`]).
    writes_issued: u64,
    /// Start of the measured part of the main phase (after the ramp).
    measured_start: u64,
    result: CpuResult,
}

impl<'a, B: IoBackend + ?Sized, const PLAIN: bool> CpuRun<'a, B, PLAIN> {
    fn new(
        plan: &'a JobPlan,
        slice: CpuSlice,
        backend: &'a mut B,
        shared: &'a JobShared,
        live: &'a CpuLive,
    ) -> Result<Self, WorkloadError> {
        let depth = plan.iodepth as usize;
        let bs = plan.bs() as usize;
        let buffer_bytes = plan.max_io_bytes() as usize;
        // Check every buffer once up front, and give writes of unverified jobs non-zero data once,
        // so the hot path neither fills nor re-checks them.
        for slot in 0..depth {
            let buffer = backend.slot_buffer(slot);
            if buffer.len() < buffer_bytes {
                return Err(WorkloadError::BufferTooSmall {
                    slot,
                    len: buffer.len(),
                    needed: buffer_bytes,
                });
            }
            if !plan.spec.verify.is_enabled() && plan.spec.rw.writes() {
                let stamp = BlockStamp {
                    lba: slot as u64,
                    seed: plan.spec.seed,
                    generation: 0,
                };
                fill_block(VerifyMode::Pattern, &stamp, &mut buffer[..buffer_bytes]);
            }
        }
        let tracker = if plan.verify == VerifyScheme::Tracked {
            // The planner bounds the slice to MAX_TRACKED_BLOCKS_PER_CPU, so this fits in usize.
            vec![0u32; slice.blocks as usize]
        } else {
            Vec::new()
        };
        let idle_slot = Slot {
            op: IoOp::Read,
            block: 0,
            bytes: 0,
            generation: None,
            submitted_ns: 0,
            issued_ns: 0,
            next_free: NO_SLOT,
        };
        let mut slots = vec![idle_slot; depth];
        // Slot 0 first, then 1, and so on (the depth fits in u32).
        for (index, slot) in slots.iter_mut().enumerate() {
            slot.next_free = if index + 1 < depth { (index + 1) as u32 } else { NO_SLOT };
        }
        Ok(Self {
            plan,
            slice,
            backend,
            shared,
            live,
            bs,
            buffer_bytes,
            io_sectors: plan.sectors_per_block,
            io_bytes: plan.bs(),
            first_lba: plan.region_start_sector() + slice.first_block * u64::from(plan.sectors_per_block),
            sectors_per_block: u64::from(plan.sectors_per_block),
            slots,
            free_head: if depth == 0 { NO_SLOT } else { 0 },
            in_flight: 0,
            completions: vec![Completion::EMPTY; depth],
            latency_run: LatencyRun {
                op: IoOp::Read,
                latency_ns: 0,
                count: 0,
                bytes: 0,
            },
            latency_runs: depth > 1,
            deferred: Deferred::new(
                if tracker.is_empty() {
                    0
                } else {
                    MIN_DEFERRED.max(depth.saturating_mul(DEFERRED_PER_SLOT))
                },
                tracker.len(),
            ),
            tracker,
            failed_writes: Vec::with_capacity(if plan.verify == VerifyScheme::SinglePass {
                MAX_FAILED_WRITES
            } else {
                0
            }),
            failed_writes_overflow: false,
            retry: None,
            log_limit: RateLimit::new(LOG_BURST, LOG_INTERVAL_NS),
            last_progress_ns: 0,
            next_periodic_ns: 0,
            detail_start_ns: 0,
            next_sample_ns: u64::MAX,
            next_window_ns: u64::MAX,
            sample_mark: Mark::default(),
            window_mark: Mark::default(),
            live_counts: LiveCounts::default(),
            ramp_end: None,
            paced: plan.spec.is_paced(),
            next_io_ns: [0, 0],
            poisson: poisson_arrivals(plan, slice.cpu),
            restamp_after_read: !plan.spec.verify.is_enabled() && plan.spec.rw.is_mixed(),
            verify_off: plan.verify == VerifyScheme::Off,
            tracked: plan.verify == VerifyScheme::Tracked,
            issued_since_think: 0,
            think_until: None,
            writes_since_flush: 0,
            flush_wanted: false,
            flush_in_flight: false,
            backlog_written: Vec::with_capacity(backlog_capacity(plan)),
            backlog_pending: Vec::with_capacity(2 * backlog_capacity(plan) + depth),
            writes_issued: 0,
            measured_start: 0,
            result: CpuResult {
                cpu: slice.cpu,
                read: OpStats::new(),
                write: OpStats::new(),
                trim: OpStats::new(),
                runtime_ns: 0,
                verify: VerifyStats::default(),
                errors: 0,
                error_records: Vec::with_capacity(MAX_ERROR_RECORDS),
                retried: 0,
                retried_records: Vec::with_capacity(MAX_ERROR_RECORDS),
                deferred_ios: 0,
                dropped_busy_ios: 0,
                log_lines_suppressed: 0,
                stopped_early: false,
                detail: shared.detail.map(|options| Box::new(CpuDetail::new(options))),
                flush: OpStats::new(),
            },
        })
    }

    /// The slot the next submission takes, if one is free: the top of the free list.
    #[inline(always)]
    fn free_slot(&self) -> Option<usize> {
        (self.free_head != NO_SLOT).then_some(self.free_head as usize)
    }

    /// Takes `slot`, the top of the free list, off it.
    #[inline(always)]
    fn take_free_slot(&mut self, slot: usize) {
        self.free_head = self.slots[slot].next_free;
    }

    /// [`VerifyScheme::Off`]: a constant for a plain job.
    #[inline(always)]
    fn verify_off(&self) -> bool {
        PLAIN || self.verify_off
    }

    /// [`VerifyScheme::Tracked`]: a constant for a plain job.
    #[inline(always)]
    fn tracked(&self) -> bool {
        !PLAIN && self.tracked
    }

    /// Pacing or flushes: a constant for a plain job.
    #[inline(always)]
    fn paced(&self) -> bool {
        !PLAIN && self.paced
    }

    /// The phase a loop runs: a plain job has no verify pass and no end flush, so only the main
    /// phase, a constant.
    #[inline(always)]
    fn shaped(phase: Phase) -> Phase {
        if PLAIN { Phase::Main } else { phase }
    }

    fn run_all(&mut self, cpu_index: usize) -> Result<(), WorkloadError> {
        if self.plan.spec.start_delay_ns > 0 {
            self.start_delay();
        }
        let start = self.backend.now_ns();
        self.next_io_ns = [start, start];
        let ramp = self.plan.spec.ramp_ns;
        self.measured_start = start;
        self.ramp_end = (ramp > 0).then(|| start.saturating_add(ramp));
        // fio: the ramp adds to the runtime; a runtime without `time_based` caps a size-bound job.
        let deadline = self
            .plan
            .spec
            .runtime_ns
            .map(|runtime| start.saturating_add(ramp).saturating_add(runtime));
        let mut source = main_source(self.plan, cpu_index);
        if let Some(detail) = &self.result.detail {
            self.detail_start_ns = start;
            self.sample_mark.at_ns = start;
            self.window_mark.at_ns = start;
            self.next_sample_ns = start.saturating_add(detail.options.sample_interval_ns.max(1));
            if detail.options.log_window_ns != 0 {
                self.next_window_ns = start.saturating_add(detail.options.log_window_ns);
            }
        }
        self.run_phase(Phase::Main, &mut source, deadline)?;
        // Backlog reads still due when the main phase ended (its runtime ran out) are the verify
        // pass's to do: it reads every block written.
        self.backlog_written.clear();
        self.backlog_pending.clear();
        if self.plan.spec.end_flush && !self.result.stopped_early {
            // fio's end_fsync: one flush once the writes are done, in the measured time.
            self.flush_wanted = true;
            self.run_phase(Phase::Main, &mut Source::Nothing, None)?;
        }
        let end = self.backend.now_ns();
        if self.ramp_end.is_some() {
            // The job ended within its ramp: as in fio, nothing of it is measured.
            self.end_ramp(end);
        }
        self.result.runtime_ns = end.saturating_sub(self.measured_start);
        if self.result.detail.is_some() {
            // The last, partial log window (fio also writes the rest of its averaging window).
            self.sample_detail(end, true);
        }
        if self.plan.verify.has_verify_pass() {
            if self.result.stopped_early {
                self.result.verify.pass_skipped = true;
            } else {
                self.live.set_phase(CpuPhase::Verifying);
                let pass_start = self.backend.now_ns();
                // `next_from` looks blocks up by binary search.
                self.failed_writes.sort_unstable();
                // The pass reads block by block, whatever sizes the main phase drew.
                self.io_sectors = self.plan.sectors_per_block;
                self.io_bytes = self.bs as u32;
                let mut pass = if self.tracked() {
                    Source::VerifyPass { next_block: 0 }
                } else {
                    Source::Replay(Box::new(Replay {
                        stream: main_source(self.plan, cpu_index),
                        writes_left: self.writes_issued,
                        next_block: 0,
                        end_block: 0,
                    }))
                };
                self.run_phase(Phase::VerifyPass, &mut pass, None)?;
                self.result.verify.pass_ns = self.backend.now_ns().saturating_sub(pass_start);
            }
        }
        Ok(())
    }

    /// Detail mode: takes the interval sample and the log window that are due at `now`; with
    /// `last`, also the partial log window since the previous one, if it saw any I/O.
    fn sample_detail(&mut self, now: u64, last: bool) {
        let totals = self.detail_totals();
        let rw = self.plan.spec.rw;
        let directions = [rw.reads(), rw.writes(), rw.trims()];
        let Some(detail) = self.result.detail.as_deref_mut() else {
            return;
        };
        if !last && now >= self.next_sample_ns {
            detail.take_sample(&mut self.sample_mark, &totals, now, directions);
            self.next_sample_ns = now.saturating_add(detail.options.sample_interval_ns.max(1));
        }
        let window_due = now >= self.next_window_ns;
        let partial_left = last
            && self.next_window_ns != u64::MAX
            && totals.ios.iter().sum::<u64>() != self.window_mark.ios.iter().sum::<u64>();
        if window_due || partial_left {
            detail.take_window(&mut self.window_mark, &totals, now, self.detail_start_ns, directions);
            self.next_window_ns = now.saturating_add(detail.options.log_window_ns);
        }
    }

    fn detail_totals(&self) -> Totals {
        let mut totals = Totals::default();
        if let Some(detail) = &self.result.detail {
            for (index, (stats, direction)) in [
                (&self.result.read, &detail.read),
                (&self.result.write, &detail.write),
                (&self.result.trim, &detail.trim),
            ]
            .into_iter()
            .enumerate()
            {
                totals.bytes[index] = stats.bytes;
                totals.ios[index] = stats.ios;
                totals.latency[index] = (
                    stats.latency.samples(),
                    direction.slat.sum(),
                    direction.clat.sum(),
                    stats.latency.sum(),
                );
            }
        }
        totals
    }

    /// fio's `startdelay`: waits before the first I/O, keeping the periodic hook going; a stop
    /// request ends the wait.
    #[cold]
    fn start_delay(&mut self) {
        let begin = self.backend.now_ns();
        let until = begin.saturating_add(self.plan.spec.start_delay_ns);
        let mut now = begin;
        while now < until && !self.shared.stop_requested() {
            if now >= self.next_periodic_ns {
                self.next_periodic_ns = now.saturating_add(PERIODIC_INTERVAL_NS);
                self.backend.periodic(now);
            }
            self.backend.idle(0);
            now = self.backend.now_ns();
        }
    }

    /// Whether pacing lets an I/O of `op` start now (`rate`, `rate_iops`, `thinktime`); when it
    /// does, the I/O is counted against the pace.
    #[cold]
    fn pace_allows(&mut self, op: IoOp) -> bool {
        let now = self.backend.now_ns();
        let spec = &self.plan.spec;
        if spec.think_ns > 0 {
            if let Some(until) = self.think_until {
                if now < until {
                    return false;
                }
                self.think_until = None;
            }
            if self.issued_since_think >= spec.think_blocks {
                // fio waits for what is in flight, then thinks.
                if self.in_flight > 0 {
                    return false;
                }
                self.issued_since_think = 0;
                self.think_until = Some(now.saturating_add(spec.think_ns));
                return false;
            }
        }
        let direction = usize::from(op == IoOp::Write);
        let interval = spec.io_interval_ns[direction];
        if interval > 0 {
            if now < self.next_io_ns[direction] {
                return false;
            }
            let gap = match &mut self.poisson {
                Some(arrivals) => arrivals[direction].next_gap_ns(interval),
                None => interval,
            };
            self.next_io_ns[direction] = self.next_io_ns[direction].saturating_add(gap);
        }
        self.issued_since_think += 1;
        true
    }

    /// Issues the due flush in a free slot (the caller checked that nothing is in flight). A busy
    /// backend leaves it due; a submission that fails at once completes it as failed.
    #[cold]
    fn submit_flush(&mut self, phase: Phase) -> Result<(), WorkloadError> {
        let Some(slot) = self.free_slot() else {
            return Ok(());
        };
        let submitted_ns = self.backend.now_ns();
        match self.backend.submit(slot, IoOp::Flush, 0, 0) {
            Err(SubmitError::Busy) => Ok(()),
            outcome => {
                self.take_free_slot(slot);
                self.slots[slot] = Slot {
                    op: IoOp::Flush,
                    block: 0,
                    bytes: 0,
                    generation: None,
                    submitted_ns,
                    issued_ns: submitted_ns,
                    next_free: IN_FLIGHT,
                };
                self.in_flight += 1;
                self.flush_wanted = false;
                self.flush_in_flight = true;
                self.last_progress_ns = submitted_ns;
                if let Err(SubmitError::Failed(error)) = outcome {
                    self.complete(Completion::new(slot, Err(error)), submitted_ns, phase)?;
                }
                Ok(())
            }
        }
    }

    /// A flush completed: its own counts, no block to track.
    #[cold]
    fn complete_flush(&mut self, completion: Completion, slot: Slot, done_ns: u64, phase: Phase) {
        self.flush_in_flight = false;
        let stats = &mut self.result.flush;
        stats.ios += 1;
        match completion.result {
            Ok(()) => stats.latency.record(done_ns.saturating_sub(slot.submitted_ns)),
            Err(_) => {
                stats.errors += 1;
                self.result.errors += 1;
                self.live_counts.errors += 1;
                if self.plan.spec.stop_on_error {
                    self.shared.request_stop();
                }
            }
        }
        if completion.result.is_err() || completion.retries > 0 {
            self.note_unusual(&completion, slot, 0, done_ns, phase);
        }
    }

    /// verify_backlog: a write of `block` completed; every N of them are due to be read back.
    #[cold]
    fn note_backlog_write(&mut self, block: u64) {
        if self.verify_off() {
            return;
        }
        self.backlog_written.push(block);
        if self.backlog_written.len() >= self.plan.spec.verify_backlog as usize {
            let room = self.backlog_pending.capacity() - self.backlog_pending.len();
            let take = self.backlog_written.len().min(room);
            // Read back oldest first (`next_from` pops from the end).
            self.backlog_pending
                .splice(0..0, self.backlog_written.drain(..take).rev());
            self.backlog_written.clear();
        }
    }

    /// Ends the ramp: what was counted so far is dropped and measuring starts at `now`. Errors and
    /// their records stay (a failed I/O is reported whenever it happened).
    #[cold]
    fn end_ramp(&mut self, now: u64) {
        self.ramp_end = None;
        self.measured_start = now;
        self.result.read = OpStats::new();
        self.result.write = OpStats::new();
        self.result.trim = OpStats::new();
    }

    /// The next I/O of `source`, or `None` when it is exhausted.
    fn next_from(&mut self, source: &mut Source) -> Option<(IoOp, u64)> {
        match source {
            Source::Main(generator) => {
                // verify_backlog: blocks written lately are read back first (a plain job has
                // no verify, so no backlog).
                if !PLAIN && let Some(block) = self.backlog_pending.pop() {
                    return Some((IoOp::Read, block));
                }
                generator.next_io()
            }
            Source::Sized(generator) => {
                let (op, block, units) = generator.next_sized_io()?;
                // At most the largest size, which fits in u32.
                self.io_sectors = self.plan.sectors_per_block * units;
                self.io_bytes = self.bs as u32 * units;
                Some((op, block))
            }
            Source::Files(files) => {
                if let Some(block) = self.backlog_pending.pop() {
                    return Some((IoOp::Read, block));
                }
                files.next_io()
            }
            Source::Nothing => None,
            Source::VerifyPass { next_block } => {
                while *next_block < self.slice.blocks {
                    let block = *next_block;
                    *next_block += 1;
                    if !self.tracked() {
                        return Some((IoOp::Read, block));
                    }
                    // Block indices are below the slice length, which is the tracker length.
                    let word = self.tracker[block as usize];
                    if word & TRACK_UNKNOWN != 0 {
                        // Its last write failed: nothing to expect, so do not read it.
                        self.result.verify.skipped += 1;
                    } else if word & TRACK_GENERATION != 0 {
                        return Some((IoOp::Read, block));
                    }
                }
                None
            }
            Source::Replay(replay) => loop {
                if replay.next_block < replay.end_block {
                    let block = replay.next_block;
                    replay.next_block += 1;
                    if !self.failed_writes_overflow && self.failed_writes.binary_search(&block).is_ok() {
                        // Its write failed: it may hold the old or the new data, so it is not read.
                        self.result.verify.skipped += 1;
                        continue;
                    }
                    return Some((IoOp::Read, block));
                }
                if replay.writes_left == 0 {
                    return None;
                }
                replay.writes_left -= 1;
                let (block, units) = match &mut replay.stream {
                    Source::Main(generator) => generator.next_io().map(|(_, block)| (block, 1))?,
                    Source::Sized(generator) => generator.next_sized_io().map(|(_, block, units)| (block, units))?,
                    Source::Files(files) => files.next_io().map(|(_, block)| (block, 1))?,
                    // The pass replays a main phase's stream only.
                    Source::Nothing | Source::VerifyPass { .. } | Source::Replay(_) => return None,
                };
                replay.next_block = block;
                replay.end_block = block + u64::from(units);
            },
        }
    }

    fn run_phase(&mut self, phase: Phase, source: &mut Source, deadline: Option<u64>) -> Result<(), WorkloadError> {
        // The completions array is out of `self` for the whole phase: `complete` cannot change
        // it, so a reap walks it with no bounds check per completion and no move in and out of
        // `self` per reap.
        let mut completions = core::mem::take(&mut self.completions);
        let outcome = self.run_phase_with(phase, source, deadline, &mut completions);
        self.completions = completions;
        outcome
    }

    /// [`CpuRun::run_phase`] with the completions array at hand.
    fn run_phase_with(
        &mut self,
        phase: Phase,
        source: &mut Source,
        deadline: Option<u64>,
        completions: &mut [Completion],
    ) -> Result<(), WorkloadError> {
        debug_assert!(!PLAIN || phase == Phase::Main);
        let phase = Self::shaped(phase);
        let mut issuing = true;
        self.retry = None;
        self.deferred.clear();
        // No deadline: one that never comes, so the loop's look is one compare.
        let deadline = deadline.unwrap_or(u64::MAX);
        let mut now = self.backend.now_ns();
        self.last_progress_ns = now;
        loop {
            if now >= self.next_periodic_ns {
                self.next_periodic_ns = now.saturating_add(PERIODIC_INTERVAL_NS);
                // The live counters serve the progress line (once a second): published here,
                // about every 100 ms, and when the phase ends, not after every reap.
                self.live.publish(&self.live_counts());
                self.backend.periodic(now);
                if !PLAIN && phase == Phase::Main && self.result.detail.is_some() {
                    self.sample_detail(now, false);
                }
            }
            if !PLAIN && self.ramp_end.is_some_and(|end| now >= end) && phase == Phase::Main {
                self.end_ramp(now);
            }
            if issuing && (now >= deadline || self.shared.stop_requested()) {
                issuing = false;
                // What was drawn but not issued is dropped: the job is over (time-based) or stopped.
                self.retry = None;
                self.deferred.clear();
                if self.shared.stop_requested() {
                    self.result.stopped_early = true;
                }
            }
            if issuing {
                let ios_before = self.live_counts.ios;
                issuing = self.issue(source, phase)?;
                if !PLAIN
                    && issuing
                    && self.in_flight == 0
                    && self.live_counts.ios == ios_before
                    && !self.has_io_waiting()
                {
                    // Nothing outstanding, nothing submitted and nothing waiting to go: waiting
                    // could only end in the stall timeout. A bug in the engine's bookkeeping if
                    // it happens; the phase ends rather than hang.
                    debug_assert!(false, "cpu{}: {phase:?} waits with nothing in flight", self.slice.cpu);
                    issuing = false;
                }
            }
            if self.in_flight == 0 && !issuing {
                self.flush_suppressed_log();
                self.live.publish(&self.live_counts());
                return Ok(());
            }
            let reaped = self.backend.poll_reaped(completions);
            if reaped.succeeded == 0 && reaped.listed == 0 {
                now = self.backend.now_ns();
                let waited = now.saturating_sub(self.last_progress_ns);
                // A paced job with nothing in flight is waiting for its pace, not for the device.
                let stalled = !self.paced() || self.in_flight > 0;
                if stalled && waited > self.plan.spec.io_timeout_ns {
                    return Err(WorkloadError::Stalled {
                        cpu: self.slice.cpu,
                        in_flight: self.in_flight,
                        waited_ns: waited,
                        limit_ns: self.plan.spec.io_timeout_ns,
                    });
                }
                let idle_from = now;
                self.backend.idle(self.in_flight);
                now = self.backend.now_ns();
                if !PLAIN
                    && phase == Phase::Main
                    && let Some(detail) = &mut self.result.detail
                {
                    detail.idle_ns += now.saturating_sub(idle_from);
                }
                continue;
            }
            if !PLAIN && let Some(detail) = &mut self.result.detail {
                let count = Reaped {
                    listed: reaped.listed.min(completions.len()),
                    ..reaped
                }
                .count();
                detail.completions_per_reap[batch_bucket(count)] += count as u64;
            }
            let done_ns = self.backend.now_ns();
            // The successes the mask names: `complete` inlined with a constant outcome, so none
            // of its looks at failures and retries remains.
            let mut succeeded = reaped.succeeded;
            while succeeded != 0 {
                let slot = succeeded.trailing_zeros() as usize;
                succeeded &= succeeded - 1;
                self.complete(Completion::new(slot, Ok(())), done_ns, phase)?;
            }
            // A larger count than the array holds is clamped (`IoBackend::poll_completions`),
            // here only when something is listed: a plain reap lists nothing.
            if reaped.listed != 0 {
                completions[..reaped.listed.min(completions.len())]
                    .iter()
                    .try_for_each(|&completion| self.complete(completion, done_ns, phase))?;
            }
            self.record_latency_run();
            self.last_progress_ns = done_ns;
            // The completion time serves as the next round's clock: one clock read fewer per round
            // (clock reads were half of the per-I/O cost on the host benchmark).
            now = done_ns;
        }
    }

    /// Fills free slots: first an I/O the backend refused as busy, then deferred I/Os whose block is
    /// no longer in flight, then new I/Os from `source`. An I/O whose block is in flight is deferred
    /// and the next one is drawn, until the deferral queue is full. Returns false once `source` is
    /// exhausted and nothing waits to be issued.
    ///
    /// At most one submission per slot per call: a submission that fails at once frees its slot
    /// again, and without the bound a device that rejects everything would keep the CPU here, past
    /// the runtime, the stop flag and the periodic hook.
    fn issue(&mut self, source: &mut Source, phase: Phase) -> Result<bool, WorkloadError> {
        let mut submissions_left = self.slots.len();
        let mut drops_left = self.slots.len();
        // A time-based job has no set number of I/Os, so once the queue is full an I/O for a busy
        // block is dropped, as if another block had been drawn. A size-bound job must issue every
        // I/O it drew, so it waits instead.
        let may_drop = self.plan.spec.is_time_based();
        // One clock read per burst: every I/O of the burst starts at the burst's first submission.
        // The burst is submitted back to back (at most one per slot), so an I/O's latency reads
        // high by at most the time to submit the I/Os before it in the burst (docs/bench.md).
        let burst_ns = self.backend.now_ns();
        while self.free_head != NO_SLOT && submissions_left > 0 {
            if self.paced() && phase == Phase::Main && (self.flush_in_flight || self.flush_wanted) {
                // fio's fsync: what is in flight completes, then the flush alone.
                if self.flush_in_flight || self.in_flight > 0 {
                    return Ok(true);
                }
                self.submit_flush(phase)?;
                return Ok(true);
            }
            // Tested before it is taken: the take is a load and two stores per I/O.
            let io = if let Some(io) = self.retry {
                self.retry = None;
                io
            } else if self.tracked()
                && let Some(io) = self.deferred.take_ready(&self.tracker)
            {
                io
            } else if self.tracked() && self.deferred.is_full() && !may_drop {
                // (Only tracked jobs defer I/Os: the others skip both looks.)
                // Everything waiting is for blocks in flight: wait for one of them.
                return Ok(true);
            } else if let Some(io) = self.next_from(source) {
                if self.tracked() && self.tracker[io.1 as usize] & TRACK_BUSY != 0 {
                    if !self.deferred.is_full() {
                        self.deferred.push(io);
                        self.result.deferred_ios += 1;
                        continue;
                    }
                    self.result.dropped_busy_ios += 1;
                    drops_left -= 1;
                    if drops_left == 0 {
                        // Every draw hits a busy block (a slice not much larger than iodepth):
                        // wait for a completion rather than spin here.
                        return Ok(true);
                    }
                    continue;
                }
                io
            } else {
                // The source is exhausted; what is deferred still has to go out, and so does a
                // verify backlog that writes still in flight may complete.
                let backlog_due =
                    !self.backlog_pending.is_empty() || (!self.backlog_written.is_empty() && self.in_flight > 0);
                return Ok(self.retry.is_some() || !self.deferred.is_empty() || backlog_due);
            };
            if self.paced() && phase == Phase::Main && !self.pace_allows(io.0) {
                // Not yet: it goes first when the pace allows (the loop comes back here).
                self.retry = Some(io);
                return Ok(true);
            }
            submissions_left -= 1;
            if !self.try_submit(io, burst_ns, phase)? {
                self.retry = Some(io);
                return Ok(true);
            }
            if !PLAIN && io.0 == IoOp::Write && self.plan.spec.flush_every_writes != 0 && phase == Phase::Main {
                self.writes_since_flush += 1;
                if self.writes_since_flush >= self.plan.spec.flush_every_writes {
                    self.writes_since_flush = 0;
                    self.flush_wanted = true;
                }
            }
        }
        Ok(true)
    }

    /// Whether an I/O waits to be issued although none may go now: one the backend refused as
    /// busy or the pace holds back (`retry`), or a due flush. With nothing in flight and nothing
    /// submitted, only these justify waiting.
    #[cold]
    fn has_io_waiting(&self) -> bool {
        self.retry.is_some() || self.flush_wanted
    }

    /// The generation an I/O of `op` on `block` writes or expects (verify jobs only).
    fn expected_generation(&self, op: IoOp, block: u64) -> Option<ExpectedGeneration> {
        match (self.plan.verify, op) {
            // Verify with trims is refused when the job is planned.
            (VerifyScheme::Off, _) | (_, IoOp::Flush | IoOp::Trim) => None,
            (VerifyScheme::ReadOnly(expected), _) => Some(expected),
            // A block whose write failed may hold the old or the new data: read it (the read's
            // own outcome counts) but expect nothing, so it ends up unchecked, not a mismatch.
            (VerifyScheme::SinglePass, IoOp::Read)
                if self.failed_writes_overflow || self.failed_writes.binary_search(&block).is_ok() =>
            {
                None
            }
            (VerifyScheme::SinglePass, _) => Some(ExpectedGeneration::Exact(1)),
            (VerifyScheme::Tracked, IoOp::Write) => {
                let current = self.tracker[block as usize] & TRACK_GENERATION;
                Some(ExpectedGeneration::Exact((current + 1).min(MAX_GENERATION)))
            }
            (VerifyScheme::Tracked, IoOp::Read) => {
                let word = self.tracker[block as usize];
                let current = word & TRACK_GENERATION;
                (word & TRACK_UNKNOWN == 0 && current != 0).then_some(ExpectedGeneration::Exact(current))
            }
        }
    }

    fn lba_of(&self, block: u64) -> u64 {
        self.first_lba + block * self.sectors_per_block
    }

    /// Stamps a write's buffer or clears a verified read's headers before `try_submit` hands the
    /// slot to the backend.
    fn prepare_buffer(
        &mut self,
        slot: usize,
        op: IoOp,
        generation: Option<ExpectedGeneration>,
        lba: u64,
        read_into_buffer: bool,
    ) -> Result<(), WorkloadError> {
        let seed = self.plan.spec.seed;
        let bs = self.bs;
        let mode = self.plan.spec.verify;
        let buffer = self.backend.slot_buffer(slot);
        if buffer.len() < self.buffer_bytes {
            return Err(WorkloadError::BufferTooSmall {
                slot,
                len: buffer.len(),
                needed: self.buffer_bytes,
            });
        }
        match (op, generation) {
            (IoOp::Write, Some(ExpectedGeneration::Exact(generation))) => {
                let stamp = BlockStamp { lba, seed, generation };
                let spb = u64::from(self.plan.sectors_per_block);
                let io = &mut buffer[..self.io_bytes as usize];
                stamp_blocks(mode, &self.plan.spec.verify_pattern, stamp, spb, bs, io);
            }
            (IoOp::Read, Some(_)) => clear_headers(bs, &mut buffer[..self.io_bytes as usize]),
            (IoOp::Write, None) if read_into_buffer => {
                let stamp = BlockStamp {
                    lba,
                    seed,
                    generation: 0,
                };
                fill_block(VerifyMode::Pattern, &stamp, &mut buffer[..self.io_bytes as usize]);
            }
            _ => {}
        }
        Ok(())
    }

    /// Tries to start `io` (whose block is not in flight) in a free slot. Returns false when the
    /// backend is busy; an immediate failure counts as a completed, failed I/O. `submitted_ns` is
    /// the clock read of the burst this submission belongs to.
    fn try_submit(&mut self, (op, block): (IoOp, u64), submitted_ns: u64, phase: Phase) -> Result<bool, WorkloadError> {
        let tracked = self.tracked();
        debug_assert!(!tracked || self.tracker[block as usize] & TRACK_BUSY == 0);
        let Some(slot) = self.free_slot() else {
            return Ok(false);
        };
        let lba = self.lba_of(block);
        // Unverified jobs (the benchmark case) skip the match: a jump table is an indirect jump.
        let generation = if self.verify_off() {
            None
        } else {
            self.expected_generation(op, block)
        };
        // Asked of writes only: a read never refills its buffer.
        let read_into_buffer = || op == IoOp::Write && self.restamp_after_read && self.slots[slot].op == IoOp::Read;
        // The buffer is touched only to stamp a write or clear a verified read's headers: a
        // plain benchmark I/O skips it.
        let touches_buffer = match (op, generation) {
            (IoOp::Write, Some(ExpectedGeneration::Exact(_))) | (IoOp::Read, Some(_)) => true,
            (IoOp::Write, None) => read_into_buffer(),
            _ => false,
        };
        if touches_buffer {
            let read_into_buffer = read_into_buffer();
            self.prepare_buffer(slot, op, generation, lba, read_into_buffer)?;
        }
        let sectors = self.io_sectors;
        // An accepted submission is one test of the outcome; a refused one goes out of line.
        if let Err(refusal) = self.backend.submit(slot, op, lba, sectors) {
            return self.submission_refused(refusal, slot, (op, block), generation, submitted_ns, phase);
        }
        self.record_submission(slot, (op, block), generation, submitted_ns);
        Ok(true)
    }

    /// `try_submit` after the backend refused the submission: busy (the slot stays free:
    /// false), or failed at once, which counts as a submitted I/O that completed with the
    /// failure.
    #[inline(never)]
    fn submission_refused(
        &mut self,
        refusal: SubmitError,
        slot: usize,
        io: (IoOp, u64),
        generation: Option<ExpectedGeneration>,
        submitted_ns: u64,
        phase: Phase,
    ) -> Result<bool, WorkloadError> {
        let SubmitError::Failed(error) = refusal else {
            return Ok(false);
        };
        self.record_submission(slot, io, generation, submitted_ns);
        self.complete(Completion::new(slot, Err(error)), submitted_ns, phase)?;
        Ok(true)
    }

    /// Takes free `slot` for `op` on `block`, submitted in the burst of `submitted_ns`.
    #[inline(always)]
    fn record_submission(
        &mut self,
        slot: usize,
        (op, block): (IoOp, u64),
        generation: Option<ExpectedGeneration>,
        submitted_ns: u64,
    ) {
        // Detail mode only: the second clock read costs as much as the engine's own work per
        // I/O on the host benchmark.
        let issued_ns = if !PLAIN && let Some(detail) = &mut self.result.detail {
            detail.depth_at_submit[depth_bucket(self.in_flight + 1)] += 1;
            self.backend.now_ns()
        } else {
            submitted_ns
        };
        let bytes = self.io_bytes;
        let entry = &mut self.slots[slot];
        self.free_head = entry.next_free;
        entry.next_free = IN_FLIGHT;
        entry.op = op;
        entry.block = block;
        entry.bytes = bytes;
        entry.submitted_ns = submitted_ns;
        if !PLAIN {
            // A plain job expects no generation and measures no issue time: it never reads
            // either, so they are not written.
            entry.generation = generation;
            entry.issued_ns = issued_ns;
        }
        self.in_flight += 1;
        if !PLAIN && op == IoOp::Write {
            self.writes_issued += 1;
        }
        if self.tracked() {
            self.tracker[block as usize] |= TRACK_BUSY;
        }
        self.last_progress_ns = submitted_ns;
    }

    #[inline(always)]
    fn complete(&mut self, completion: Completion, done_ns: u64, phase: Phase) -> Result<(), WorkloadError> {
        let bogus = |reason| WorkloadError::BogusCompletion {
            cpu: self.slice.cpu,
            slot: completion.slot,
            reason,
        };
        let Some(entry) = self.slots.get_mut(completion.slot) else {
            return Err(bogus("is out of range"));
        };
        if !entry.in_flight() {
            return Err(bogus("is not in flight"));
        }
        // Only what every I/O needs is read here; the rare paths read the slot again (it keeps
        // its fields until the next submission in it).
        let (op, block, bytes, submitted_ns) = (entry.op, entry.block, entry.bytes, entry.submitted_ns);
        // Pushed on the free list: back into use first, as the slot whose buffer is warm.
        entry.next_free = self.free_head;
        // Below the depth, which fits in u32.
        self.free_head = completion.slot as u32;
        self.in_flight -= 1;
        let phase = Self::shaped(phase);
        if !PLAIN && op == IoOp::Flush {
            self.complete_flush(completion, self.slots[completion.slot], done_ns, phase);
            return Ok(());
        }
        if !PLAIN {
            self.live_counts.ios += 1;
        }
        let tracked = self.tracked();
        let block_index = block as usize;
        // The main phase's I/Os count in their direction's statistics (a flush has returned
        // above), the verify pass's in its own.
        let measured = phase == Phase::Main;
        match completion.result {
            Ok(()) => {
                let bytes = u64::from(bytes);
                if !PLAIN {
                    self.live_counts.bytes += bytes;
                }
                if measured {
                    let latency_ns = done_ns.saturating_sub(submitted_ns);
                    if self.latency_runs {
                        self.add_success(op, latency_ns, bytes);
                    } else {
                        let stats = self.stats_of(op);
                        stats.ios += 1;
                        stats.bytes += bytes;
                        stats.latency.record(latency_ns);
                    }
                    if !PLAIN && let Some(detail) = &mut self.result.detail {
                        let issued_ns = self.slots[completion.slot].issued_ns;
                        let direction = match op {
                            IoOp::Read => &mut detail.read,
                            IoOp::Trim => &mut detail.trim,
                            _ => &mut detail.write,
                        };
                        direction.slat.record(issued_ns.saturating_sub(submitted_ns));
                        direction.clat.record(done_ns.saturating_sub(issued_ns));
                    }
                } else {
                    self.result.verify.pass_reads += 1;
                }
                if !PLAIN && op == IoOp::Write && phase == Phase::Main && self.plan.spec.verify_backlog != 0 {
                    self.note_backlog_write(block);
                }
                // Unverified jobs expect nothing: no generation, no check.
                if !self.verify_off() {
                    match (op, self.slots[completion.slot].generation) {
                        (IoOp::Write, Some(ExpectedGeneration::Exact(generation))) if tracked => {
                            self.tracker[block_index] = generation;
                        }
                        (IoOp::Read, Some(expected)) => {
                            let lba = self.lba_of(block);
                            self.check_read(completion.slot, lba, bytes as usize, expected, done_ns)
                        }
                        (IoOp::Read, None) => self.result.verify.unchecked += 1,
                        _ => {}
                    }
                }
            }
            Err(_) => {
                if !PLAIN {
                    self.live_counts.errors += 1;
                }
                if measured {
                    let stats = self.stats_of(op);
                    stats.ios += 1;
                    stats.errors += 1;
                } else {
                    self.result.verify.pass_reads += 1;
                }
                self.result.errors += 1;
                let slot = self.slots[completion.slot];
                if let (IoOp::Write, Some(ExpectedGeneration::Exact(generation))) = (op, slot.generation)
                    && tracked
                {
                    // The block may hold the old or the new version: stop expecting either, but keep
                    // counting so the next write gets a fresh generation.
                    self.tracker[block_index] = TRACK_UNKNOWN | generation;
                }
                if op == IoOp::Write && self.plan.verify == VerifyScheme::SinglePass {
                    self.note_failed_write(slot);
                }
                if op == IoOp::Read && !self.verify_off() {
                    // Every read of a verify job ends up checked, unchecked, or a mismatch.
                    self.result.verify.unchecked += 1;
                }
                if self.plan.spec.stop_on_error {
                    self.shared.request_stop();
                }
            }
        }
        if tracked {
            self.tracker[block_index] &= !TRACK_BUSY;
            self.deferred.block_freed(block);
        }
        if completion.result.is_err() || completion.retries > 0 {
            self.note_unusual(
                &completion,
                self.slots[completion.slot],
                self.lba_of(block),
                done_ns,
                phase,
            );
        }
        Ok(())
    }

    /// The main phase's statistics of `op`'s direction (a flush keeps its own,
    /// `complete_flush`, and never comes here).
    #[inline(always)]
    fn stats_of(&mut self, op: IoOp) -> &mut OpStats {
        // Reads first, then writes: a read's statistics after one compare (a `match` tests
        // trims first).
        if op == IoOp::Read {
            &mut self.result.read
        } else if op == IoOp::Write {
            &mut self.result.write
        } else {
            &mut self.result.trim
        }
    }

    /// Counts a main-phase success of `op` of `bytes` that took `latency_ns` into the reap's
    /// run (see [`LatencyRun`]); a different one records the run so far and starts another.
    #[inline(always)]
    fn add_success(&mut self, op: IoOp, latency_ns: u64, bytes: u64) {
        let run = &mut self.latency_run;
        if run.latency_ns == latency_ns && run.op == op {
            run.count += 1;
            run.bytes += bytes;
        } else {
            self.record_latency_run();
            self.latency_run = LatencyRun {
                op,
                latency_ns,
                count: 1,
                bytes,
            };
        }
    }

    /// Records the reap's run of equal latencies in its direction's statistics.
    #[inline(always)]
    fn record_latency_run(&mut self) {
        let LatencyRun {
            op,
            latency_ns,
            count,
            bytes,
        } = self.latency_run;
        if count == 0 {
            return;
        }
        // Emptied: an equal success next counts from nothing.
        self.latency_run.count = 0;
        self.latency_run.bytes = 0;
        let stats = self.stats_of(op);
        stats.ios += count;
        stats.bytes += bytes;
        stats.latency.record_n(latency_ns, count);
    }

    /// What the progress line shows. A plain job counts nothing apart per I/O: with no verify
    /// pass, no flush and no ramp, its completed I/Os, bytes and errors are exactly those of its
    /// statistics, summed here once per reap.
    fn live_counts(&self) -> LiveCounts {
        if PLAIN {
            let r = &self.result;
            LiveCounts {
                ios: r.read.ios + r.write.ios + r.trim.ios,
                bytes: r.read.bytes + r.write.bytes + r.trim.bytes,
                errors: r.errors,
                mismatches: 0,
            }
        } else {
            self.live_counts
        }
    }

    /// Counts, keeps (the first few) and logs (rate-limited) a failed or retried I/O.
    fn note_unusual(&mut self, completion: &Completion, slot: Slot, lba: u64, done_ns: u64, phase: Phase) {
        let record = IoRecord {
            at_ns: done_ns,
            op: slot.op,
            lba,
            // The planner checked the sector size (non-zero, dividing bs).
            sectors: slot.bytes / self.plan.device.sector_size,
            result: completion.result,
            retries: completion.retries,
            in_verify_pass: phase == Phase::VerifyPass,
        };
        if completion.result.is_err() && self.result.error_records.len() < MAX_ERROR_RECORDS {
            self.result.error_records.push(record);
        }
        if completion.retries > 0 {
            self.result.retried += 1;
            if self.result.retried_records.len() < MAX_ERROR_RECORDS {
                self.result.retried_records.push(record);
            }
        }
        if let Verdict::Print { suppressed_before } = self.log_limit.check(done_ns) {
            let cpu = self.slice.cpu;
            if suppressed_before == 0 {
                self.backend.log_line(format_args!("cpu{cpu}: {record}"));
            } else {
                self.backend.log_line(format_args!(
                    "cpu{cpu}: {record} ({suppressed_before} similar lines suppressed)"
                ));
            }
        }
    }

    /// Says how many per-I/O lines the rate limit held back since the last one printed.
    fn flush_suppressed_log(&mut self) {
        let suppressed = self.log_limit.take_pending_suppressed();
        if suppressed > 0 {
            let cpu = self.slice.cpu;
            self.backend.log_line(format_args!(
                "cpu{cpu}: {suppressed} more lines about failed or retried I/Os suppressed"
            ));
        }
        self.result.log_lines_suppressed = self.log_limit.total_suppressed();
    }

    /// Remembers every block of a failed write (several with variable block sizes) for the verify
    /// pass, which reads them unchecked. Preallocated: no allocation on the I/O path.
    #[cold]
    fn note_failed_write(&mut self, slot: Slot) {
        for block in slot.block..slot.block + (slot.bytes as usize / self.bs) as u64 {
            if self.failed_writes.len() < MAX_FAILED_WRITES {
                self.failed_writes.push(block);
            } else {
                self.failed_writes_overflow = true;
            }
        }
    }

    /// Checks every block of the `bytes` a read brought into `slot` (one block, or with variable
    /// block sizes several, each with its own stamp). Out of line: verify jobs only, and inlined
    /// it cost unverified jobs instructions per I/O in `run_phase`.
    #[inline(never)]
    fn check_read(&mut self, slot: usize, lba: u64, bytes: usize, expected: ExpectedGeneration, done_ns: u64) {
        let bs = self.bs;
        let mode = self.plan.spec.verify;
        let seed = self.plan.spec.seed;
        let spb = u64::from(self.plan.sectors_per_block);
        for index in 0..(bytes / bs).max(1) {
            // The length was checked at submit time; a backend that shrank it since gets a
            // mismatch, not a panic.
            let buffer = self.backend.slot_buffer(slot);
            let block = buffer
                .get(index * bs..)
                .map_or(&[][..], |rest| &rest[..bs.min(rest.len())]);
            let block_lba = lba + index as u64 * spb;
            match check_stamped(mode, &self.plan.spec.verify_pattern, block_lba, seed, expected, block) {
                Ok(_) => self.result.verify.checked += 1,
                Err(mismatch) => {
                    self.result.verify.mismatches += 1;
                    self.live_counts.mismatches += 1;
                    if self.result.verify.first_mismatch.is_none() {
                        self.result.verify.first_mismatch = Some((done_ns, mismatch));
                    }
                    if self.plan.spec.stop_on_error {
                        self.shared.request_stop();
                    }
                }
            }
        }
    }
}
