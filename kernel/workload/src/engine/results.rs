//! What one CPU measured: per-direction statistics, the verify outcome, and the failed or
//! retried I/Os kept with their address.

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::fmt;

use super::{IoError, IoOp};
use crate::detail::CpuDetail;
use crate::hist::LatencyHistogram;
use crate::verify::VerifyMismatch;

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
    pub(super) fn new() -> Self {
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
    /// How many times the driver re-issued it (see
    /// [`Completion::retries`](super::Completion::retries)).
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
    /// The first [`MAX_ERROR_RECORDS`](super::MAX_ERROR_RECORDS) failed I/Os (retried or not).
    pub error_records: Vec<IoRecord>,
    /// I/Os the driver re-issued at least once, whatever their outcome, in both phases.
    pub retried: u64,
    /// The first [`MAX_ERROR_RECORDS`](super::MAX_ERROR_RECORDS) retried I/Os (a retried I/O
    /// that failed is also in `error_records`).
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
    /// What the detail mode measured ([`JobShared::with_detail`](super::JobShared::with_detail)),
    /// if it was on.
    pub detail: Option<Box<CpuDetail>>,
    /// Cache flushes (fio's `fsync`, `end_fsync`): count, failures (also in `errors`) and
    /// latency; `bytes` stays 0.
    pub flush: OpStats,
    /// fio's steady state: the window this CPU judged (its own, or the job's on its first CPU).
    pub steady: Option<crate::steady::SteadyOutcome>,
    /// fio's latency target: the queue depth the search ended at.
    pub latency_depth: Option<u32>,
    /// fio's `rate_min` / `rate_iops_min`: the cycle in which this CPU fell below it, if it did.
    pub rate_min_missed: Option<RateMinMiss>,
}

/// A direction's rate below its minimum over one cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateMinMiss {
    /// Whether the minimum was in I/Os per second (`rate_iops_min`) rather than bytes.
    pub iops: bool,
    /// The direction: writes (else reads).
    pub write: bool,
    /// The minimum, and what the cycle achieved (bytes or I/Os per second).
    pub wanted: u64,
    /// See `wanted`.
    pub got: u64,
}

impl core::fmt::Display for RateMinMiss {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let direction = if self.write { "writes" } else { "reads" };
        if self.iops {
            write!(
                f,
                "rate_iops_min={} not met by {direction}, got {} IOPS",
                self.wanted, self.got
            )
        } else {
            write!(
                f,
                "rate_min={}B/s not met by {direction}, got {}B/s",
                self.wanted, self.got
            )
        }
    }
}

impl CpuResult {
    /// Completed I/Os of the measured phase.
    pub fn ios(&self) -> u64 {
        self.read.ios + self.write.ios + self.trim.ios
    }
}
