//! baremq's workload engine: a built-in, fio-style I/O generator with verification, written as
//! hardware-independent logic that the kernel runs on every submitting CPU.
//!
//! The flow for one job:
//!
//! 1. [`parse_cmdline`] / [`parse_jobs`] turn `key=value` words into [`JobSpec`]s (syntax in [`job`]).
//! 2. [`plan_job`] checks a spec against a [`DeviceInfo`] and the online CPUs and splits the region
//!    between CPUs ([`JobPlan`]; warnings such as a capped `iodepth` are in `plan.warnings`).
//! 3. The kernel creates one [`JobShared`], and every submitting CPU calls [`run_cpu`] with its own
//!    [`IoBackend`] (the block layer on that CPU). Meanwhile one CPU may print [`ProgressMeter`]
//!    lines from [`JobShared::total`].
//! 4. [`JobReport::new`] merges the [`CpuResult`]s; the kernel adds its per-CPU counters
//!    ([`JobReport::add_counter`]) and prints [`JobReport::write_human`] and
//!    [`JobReport::write_json_line`].
//!
//! The crate is `no_std` + `alloc`, uses no floating point per I/O (only [`skew`] and [`poisson`] build their tables
//! with it, once per job and CPU), and allocates only when a job starts and
//! ends, never per I/O.

#![no_std]
#![warn(missing_docs)]
#![forbid(unsafe_code)]

extern crate alloc;
#[cfg(test)]
extern crate std;

pub mod content;
pub mod detail;
pub mod engine;
pub mod error;
pub mod fileset;
pub mod fio;
pub mod flow;
pub mod generator;
pub mod hist;
pub mod job;
pub mod json;
pub mod plan;
pub mod poisson;
pub mod randmap;
pub mod ratelimit;
pub mod report;
pub mod rng;
pub mod skew;
pub mod stages;
pub mod steady;
pub mod verify;

/// CRC32C, which `verify=crc32c` stamps into every block.
pub use crc32c;
/// The value parsers of job words (sizes, durations, CPU lists, ...), shared with the command line.
pub use values;

pub use detail::{CpuDetail, DetailOptions, JobDetail};
pub use engine::{
    Completion, CpuLive, CpuPhase, CpuResult, IoBackend, IoError, IoErrorRecord, IoOp, IoRecord, JobShared, LOG_BURST,
    LOG_INTERVAL_NS, LiveCounts, MAX_ERROR_RECORDS, MIN_DEFERRED, OpStats, Reaped, SubmitError, VerifyStats, WaveExit,
    run_cpu, split_successes,
};
pub use error::WorkloadError;
pub use generator::IoGenerator;
pub use hist::LatencyHistogram;
pub use job::{
    ACCEPTED_KEYS, AccessZone, CompletionPolicy, CpuSelection, ErrorClass, ExpectedGeneration, FileRegion, FileService,
    JobSpec, QuiescePolicy, RwMode, VerifyMode, ZoneLength, parse_cmdline, parse_jobs,
};
pub use plan::{CpuSlice, DeviceInfo, FileRoute, JobPlan, PlanFile, PlanWarning, VerifyScheme, plan_job, route_file};
pub use report::{
    FIO_JSON_PREFIX, FioJob, FioJobMeta, FioLogOptions, FioOutputFormat, FioOutputOptions, JSON_PREFIX, JobReport,
    LOG_PREFIX, ProgressMeter, VerifyResult,
};
pub use stages::{STAGE_NAMES, StageEvent, StageLatency, StageSummary, TRACE_PREFIX, summarise, write_trace_line};
pub use values::CpuSet;
pub use verify::{MismatchField, VerifyMismatch};
