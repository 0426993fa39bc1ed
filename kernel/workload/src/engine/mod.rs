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
//!
//! The engine's files: `backend` (what the engine needs of the block layer), `live` (the
//! counters CPUs publish while they run), `results` (what one CPU measured), `run` (one CPU's
//! run: its setup, phases and loop), `source` (where the I/Os come from), `issue` (filling free
//! slots), `complete` (counting what completed), `verify` (stamping, checking, the blocks a
//! verify pass skips) and `pace` (rates, think times, start delay, ramp and flushes).

use alloc::boxed::Box;
use alloc::vec::Vec;

use crate::detail::Mark;
use crate::error::WorkloadError;
use crate::job::ExpectedGeneration;
use crate::plan::{CpuSlice, JobPlan, VerifyScheme};
use crate::poisson::PoissonArrivals;
use crate::ratelimit::RateLimit;

mod backend;
mod complete;
mod issue;
mod latency;
mod live;
mod pace;
mod results;
mod run;
mod source;
mod steady;
mod verify;

pub use backend::{Completion, IoBackend, IoError, IoOp, Reaped, SubmitError, split_successes};
pub use live::{CpuLive, CpuPhase, JobShared, LiveCounts, WaveExit};
pub use results::{CpuResult, IoErrorRecord, IoRecord, OpStats, RateMinMiss, RecordStatus, VerifyStats};
use source::Deferred;
pub use verify::MAX_FAILED_WRITES;

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
        && plan.spec.write_content.is_none()
        && plan.spec.rate_min.is_none()
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
    let mut run = CpuRun::<B, PLAIN>::new(plan, slice, cpu_index, backend, shared, live)?;
    live.set_phase(CpuPhase::Running);
    let outcome = run.run_all(cpu_index);
    run.live.publish(&run.live_counts());
    live.set_phase(CpuPhase::Finished);
    outcome?;
    Ok(run.result)
}

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
///
/// [`LatencyHistogram::record_n`]: crate::hist::LatencyHistogram::record_n
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
    ///
    /// [`Source::Sized`]: source::Source::Sized
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
    /// fio's `flow`: this clone's place in its flow group (dropping it leaves the group).
    flow: Option<crate::flow::FlowGate>,
    /// fio's dedupe and compression: the content each write carries (never in the plain shape).
    content: Option<crate::content::ContentSource>,
    /// fio's minimum rates: when the clone started, and per direction the last cycle's start
    /// and the bytes and I/Os done by then.
    rate_min_since: Option<u64>,
    rate_min_last: [Option<(u64, u64, u64)>; 2],
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
    ///
    /// [`Source::Replay`]: source::Source::Replay
    writes_issued: u64,
    /// Start of the measured part of the main phase (after the ramp).
    measured_start: u64,
    /// fio's steady state, if the job has a window (`ss_dur`).
    steady: Option<alloc::boxed::Box<steady::SteadyJudge>>,
    /// fio's latency target: the queue-depth search, if the job has one.
    latency_search: Option<alloc::boxed::Box<latency::DepthSearch>>,
    /// The depth search went down or settled: issue nothing until what is in flight completes.
    quiescing: bool,
    /// Restart the statistics once drained: the search settled and its final window begins.
    restart_stats_when_drained: bool,
    result: CpuResult,
}
