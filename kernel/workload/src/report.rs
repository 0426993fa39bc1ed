//! Merging per-CPU results into a job report, and writing it: a fio-like human report, one JSON line
//! per job for the host, and the live progress line.
//!
//! All arithmetic is integer (the bare-metal target has no FPU in use); rates are rounded to nearest.

use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt::{self, Write};

use crate::engine::{CpuResult, IoRecord, LiveCounts, MAX_ERROR_RECORDS};
use crate::error::WorkloadError;
use crate::hist::LatencyHistogram;
use crate::job::{ExpectedGeneration, RwMode, VerifyMode};
use crate::json::JsonWriter;
use crate::plan::{JobPlan, VerifyScheme};
use crate::values::CpuSet;
use crate::verify::{MismatchField, VerifyMismatch};

pub mod fio_output;
pub use fio_output::{
    FIO_JSON_PREFIX, FioJob, FioJobMeta, FioLogOptions, FioOutputFormat, FioOutputOptions, LOG_PREFIX,
    write_fio_document, write_fio_json_line, write_fio_text, write_log_lines,
};

/// Prefix of the one JSON line per job, so the host can pick it out of the serial log.
pub const JSON_PREFIX: &str = "BAREMQ-JSON: ";

const NS_PER_S: u128 = 1_000_000_000;

/// `count` events over `ns` nanoseconds, per second, rounded to nearest (0 when `ns` is 0).
pub fn per_second(count: u64, ns: u64) -> u64 {
    if ns == 0 {
        return 0;
    }
    let rate = (u128::from(count) * NS_PER_S + u128::from(ns) / 2) / u128::from(ns);
    u64::try_from(rate).unwrap_or(u64::MAX)
}

/// Latency statistics of one histogram, in ns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LatencySummary {
    /// Number of samples.
    pub samples: u64,
    /// Smallest.
    pub min: u64,
    /// Mean.
    pub mean: u64,
    /// Median.
    pub p50: u64,
    /// 90th percentile.
    pub p90: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile.
    pub p99_9: u64,
    /// 99.99th percentile.
    pub p99_99: u64,
    /// Largest.
    pub max: u64,
}

impl LatencySummary {
    /// Summarises `histogram`.
    pub fn of(histogram: &LatencyHistogram) -> Self {
        Self {
            samples: histogram.samples(),
            min: histogram.min(),
            mean: histogram.mean(),
            p50: histogram.percentile_ppm(500_000),
            p90: histogram.percentile_ppm(900_000),
            p99: histogram.percentile_ppm(990_000),
            p99_9: histogram.percentile_ppm(999_000),
            p99_99: histogram.percentile_ppm(999_900),
            max: histogram.max(),
        }
    }

    fn labelled(&self) -> [(&'static str, u64); 8] {
        [
            ("min", self.min),
            ("mean", self.mean),
            ("p50", self.p50),
            ("p90", self.p90),
            ("p99", self.p99),
            ("p99_9", self.p99_9),
            ("p99_99", self.p99_99),
            ("max", self.max),
        ]
    }
}

/// Totals of one direction (or both) over the measured phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DirectionSummary {
    /// Completed I/Os, failed ones included.
    pub ios: u64,
    /// Bytes moved by successful I/Os.
    pub bytes: u64,
    /// Failed I/Os.
    pub errors: u64,
    /// `ios` per second of job runtime.
    pub iops: u64,
    /// `bytes` per second of job runtime.
    pub bw_bytes: u64,
    /// Latency of successful I/Os.
    pub latency: LatencySummary,
}

impl DirectionSummary {
    fn new(ios: u64, bytes: u64, errors: u64, histogram: &LatencyHistogram, runtime_ns: u64) -> Self {
        Self {
            ios,
            bytes,
            errors,
            iops: per_second(ios, runtime_ns),
            bw_bytes: per_second(bytes, runtime_ns),
            latency: LatencySummary::of(histogram),
        }
    }
}

/// One CPU's share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuSummary {
    /// The CPU number.
    pub cpu: u32,
    /// Completed I/Os of the measured phase.
    pub ios: u64,
    /// `ios` per second of this CPU's own runtime.
    pub iops: u64,
    /// Bytes moved in the measured phase.
    pub bytes: u64,
    /// Failed I/Os in both phases.
    pub errors: u64,
    /// Verify mismatches in both phases.
    pub mismatches: u64,
    /// This CPU's measured phase, in ns.
    pub runtime_ns: u64,
}

/// Overall verify outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VerifyResult {
    /// The job does not verify.
    Off,
    /// At least one block was checked and none mismatched.
    Pass,
    /// At least one block mismatched.
    Fail,
    /// The job verifies but checked no block at all (which must not count as a pass).
    NothingChecked,
    /// The job stamped every block it wrote for a later check and read nothing back (fio's
    /// `do_verify=0`): nothing was checked, and nothing was meant to be.
    Written,
}

impl VerifyResult {
    /// `off`, `pass`, `fail`, `nothing_checked` or `written`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::Pass => "pass",
            Self::Fail => "fail",
            Self::NothingChecked => "nothing_checked",
            Self::Written => "written",
        }
    }
}

/// Verify totals over every CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VerifySummary {
    /// `verify=` of the job.
    pub mode: VerifyMode,
    /// The outcome.
    pub result: VerifyResult,
    /// Blocks checked and correct.
    pub checked: u64,
    /// Blocks read whose content was not known.
    pub unchecked: u64,
    /// Blocks the verify pass skipped because their last write failed.
    pub skipped: u64,
    /// Blocks that mismatched.
    pub mismatches: u64,
    /// The earliest mismatch over all CPUs, with its CPU.
    pub first_mismatch: Option<(u32, VerifyMismatch)>,
    /// Reads of the verify pass.
    pub pass_reads: u64,
    /// Longest verify pass over the CPUs, in ns.
    pub pass_ns: u64,
    /// Whether any CPU skipped its verify pass because the job was stopped.
    pub pass_skipped: bool,
}

/// A per-CPU counter the kernel adds to the report (interrupts, IPIs, completion-policy counters).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CounterRow {
    /// Short name, e.g. `irqs`, `ipis`, `remote_completions`.
    pub name: String,
    /// One value per submitting CPU, in the plan's CPU order.
    pub per_cpu: Vec<u64>,
}

/// The merged result of one job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobReport {
    /// The plan the job ran with.
    pub plan: JobPlan,
    /// Longest measured phase over the CPUs, in ns: the runtime that rates are computed over.
    pub runtime_ns: u64,
    /// Reads.
    pub read: DirectionSummary,
    /// Writes.
    pub write: DirectionSummary,
    /// Trims (discards).
    pub trim: DirectionSummary,
    /// All directions.
    pub total: DirectionSummary,
    /// Failed I/Os in both phases, all CPUs.
    pub errors: u64,
    /// The earliest [`MAX_ERROR_RECORDS`] failed I/Os with their CPU, earliest first.
    pub error_records: Vec<(u32, IoRecord)>,
    /// Failed I/Os not in `error_records` (`errors - error_records.len()`).
    pub error_records_omitted: u64,
    /// I/Os the driver re-issued at least once, all CPUs, whatever their outcome.
    pub retried: u64,
    /// The earliest [`MAX_ERROR_RECORDS`] retried I/Os with their CPU, earliest first.
    pub retried_records: Vec<(u32, IoRecord)>,
    /// Retried I/Os not in `retried_records`.
    pub retried_records_omitted: u64,
    /// I/Os that waited for their block to leave flight while others were issued.
    pub deferred_ios: u64,
    /// I/Os of a time-based job dropped because their block was in flight and the deferral queue
    /// was full.
    pub dropped_busy_ios: u64,
    /// Per-I/O log lines the engine's rate limit held back.
    pub log_lines_suppressed: u64,
    /// Verify totals.
    pub verify: VerifySummary,
    /// Per-CPU shares, in the plan's CPU order.
    pub per_cpu: Vec<CpuSummary>,
    /// Kernel-supplied per-CPU counters.
    pub counters: Vec<CounterRow>,
    /// Kernel-supplied totals over the whole job (e.g. block-layer counters by completion policy).
    pub totals: Vec<(String, u64)>,
    /// Whether any CPU stopped early on request.
    pub stopped_early: bool,
    /// Per-stage latency breakdown of the traced requests (`trace=N`), if the kernel gave one.
    pub stages: Option<crate::stages::StageSummary>,
    /// The read and write latency histograms of the measured phase (submit to reap), merged.
    pub read_latency: LatencyHistogram,
    /// See `read_latency`.
    pub write_latency: LatencyHistogram,
    /// See `read_latency`.
    pub trim_latency: LatencyHistogram,
    /// The detail mode's measurements ([`crate::detail`]), when every CPU took them.
    pub detail: Option<crate::detail::JobDetail>,
    /// fio's steady state: the job's window (with `group_reporting`), or its first CPU's (each
    /// clone judges and stops on its own otherwise), and whether each CPU's was attained.
    pub steady: Option<crate::steady::SteadyOutcome>,
    /// Windows that met their criterion: each clone's own, or the job's one (`group_reporting`).
    pub steady_attained_cpus: u32,
    /// fio's latency target: the queue depth each clone's search ended at, in plan order.
    pub latency_depths: Vec<u32>,
    /// fio's `rate_min` / `rate_iops_min`: the first CPU (in plan order) that fell below it,
    /// and by how much; the job fails.
    pub rate_min_missed: Option<(u32, crate::engine::RateMinMiss)>,
    /// Each clone's own report, in plan order, when the job asks for them
    /// ([`crate::JobSpec::report_each_clone`]: fio's `numjobs` without `group_reporting`) and
    /// has more than one clone; empty otherwise. Only the engine's figures: the kernel's counters
    /// and totals go to the job's report.
    pub clones: Vec<JobReport>,
}

impl JobReport {
    /// Merges the per-CPU results of `plan` (one per planned share, in any order; the shares
    /// of one CPU, which ran by turns, in their order).
    pub fn new(plan: &JobPlan, results: &[CpuResult]) -> Result<Self, WorkloadError> {
        let mismatch = |reason| WorkloadError::ResultsMismatch {
            job: plan.spec.name.clone(),
            reason,
        };
        if results.len() != plan.cpus.len() {
            return Err(mismatch("there must be exactly one result per planned CPU"));
        }
        let mut ordered: Vec<&CpuResult> = Vec::with_capacity(results.len());
        let mut taken = alloc::vec![false; results.len()];
        for slice in &plan.cpus {
            let index = (0..results.len())
                .find(|&i| !taken[i] && results[i].cpu == slice.cpu)
                .ok_or_else(|| mismatch("a planned CPU has fewer results than shares"))?;
            taken[index] = true;
            ordered.push(&results[index]);
        }

        let runtime_ns = ordered.iter().map(|r| r.runtime_ns).max().unwrap_or(0);
        let mut read_hist = LatencyHistogram::new();
        let mut write_hist = LatencyHistogram::new();
        let mut trim_hist = LatencyHistogram::new();
        let mut read = (0, 0, 0);
        let mut write = (0, 0, 0);
        let mut trim = (0, 0, 0);
        let mut errors = 0;
        let mut error_records = Vec::new();
        let mut retried = 0;
        let mut retried_records = Vec::new();
        let mut deferred_ios = 0;
        let mut dropped_busy_ios = 0;
        let mut log_lines_suppressed = 0;
        let mut verify = VerifySummary {
            mode: plan.spec.verify,
            result: VerifyResult::Off,
            checked: 0,
            unchecked: 0,
            skipped: 0,
            mismatches: 0,
            first_mismatch: None,
            pass_reads: 0,
            pass_ns: 0,
            pass_skipped: false,
        };
        let mut first_mismatch_at = u64::MAX;
        let mut per_cpu = Vec::with_capacity(ordered.len());
        for r in &ordered {
            read_hist.merge(&r.read.latency);
            write_hist.merge(&r.write.latency);
            trim_hist.merge(&r.trim.latency);
            read = (read.0 + r.read.ios, read.1 + r.read.bytes, read.2 + r.read.errors);
            write = (write.0 + r.write.ios, write.1 + r.write.bytes, write.2 + r.write.errors);
            trim = (trim.0 + r.trim.ios, trim.1 + r.trim.bytes, trim.2 + r.trim.errors);
            errors += r.errors;
            error_records.extend(r.error_records.iter().map(|record| (r.cpu, *record)));
            retried += r.retried;
            retried_records.extend(r.retried_records.iter().map(|record| (r.cpu, *record)));
            deferred_ios += r.deferred_ios;
            dropped_busy_ios += r.dropped_busy_ios;
            log_lines_suppressed += r.log_lines_suppressed;
            verify.checked += r.verify.checked;
            verify.unchecked += r.verify.unchecked;
            verify.skipped += r.verify.skipped;
            verify.mismatches += r.verify.mismatches;
            verify.pass_reads += r.verify.pass_reads;
            verify.pass_ns = verify.pass_ns.max(r.verify.pass_ns);
            verify.pass_skipped |= r.verify.pass_skipped;
            if let Some((at, found)) = r.verify.first_mismatch
                && at < first_mismatch_at
            {
                first_mismatch_at = at;
                verify.first_mismatch = Some((r.cpu, found));
            }
            per_cpu.push(CpuSummary {
                cpu: r.cpu,
                ios: r.ios(),
                iops: per_second(r.ios(), r.runtime_ns),
                bytes: r.read.bytes + r.write.bytes + r.trim.bytes,
                errors: r.errors,
                mismatches: r.verify.mismatches,
                runtime_ns: r.runtime_ns,
            });
        }
        // Each CPU kept its earliest ones; the earliest overall are among them.
        error_records.sort_by_key(|(_, record)| record.at_ns);
        error_records.truncate(MAX_ERROR_RECORDS);
        retried_records.sort_by_key(|(_, record)| record.at_ns);
        retried_records.truncate(MAX_ERROR_RECORDS);
        verify.result = if !plan.spec.verify.is_enabled() {
            VerifyResult::Off
        } else if verify.mismatches > 0 {
            VerifyResult::Fail
        } else if verify.checked == 0 && plan.spec.skip_verify_pass && plan.verify.has_verify_pass() {
            VerifyResult::Written
        } else if verify.checked == 0 {
            VerifyResult::NothingChecked
        } else {
            VerifyResult::Pass
        };
        let mut total_hist = read_hist.clone();
        total_hist.merge(&write_hist);
        total_hist.merge(&trim_hist);
        let clones = if plan.spec.report_each_clone && plan.cpus.len() > 1 {
            plan.cpus
                .iter()
                .zip(&ordered)
                .map(|(slice, result)| {
                    let clone_plan = JobPlan {
                        cpus: alloc::vec![*slice],
                        ..plan.clone()
                    };
                    Self::new(&clone_plan, core::slice::from_ref(*result))
                })
                .collect::<Result<Vec<_>, _>>()?
        } else {
            Vec::new()
        };
        let detail = if ordered.iter().all(|r| r.detail.is_some()) && !ordered.is_empty() {
            let per_cpu = ordered.iter().filter_map(|r| r.detail.as_deref().cloned()).collect();
            let runtimes: Vec<u64> = ordered.iter().map(|r| r.runtime_ns).collect();
            Some(crate::detail::JobDetail::merge(per_cpu, &runtimes))
        } else {
            None
        };
        Ok(Self {
            plan: plan.clone(),
            runtime_ns,
            read: DirectionSummary::new(read.0, read.1, read.2, &read_hist, runtime_ns),
            write: DirectionSummary::new(write.0, write.1, write.2, &write_hist, runtime_ns),
            trim: DirectionSummary::new(trim.0, trim.1, trim.2, &trim_hist, runtime_ns),
            total: DirectionSummary::new(
                read.0 + write.0 + trim.0,
                read.1 + write.1 + trim.1,
                read.2 + write.2 + trim.2,
                &total_hist,
                runtime_ns,
            ),
            errors,
            error_records_omitted: errors.saturating_sub(error_records.len() as u64),
            error_records,
            retried,
            retried_records_omitted: retried.saturating_sub(retried_records.len() as u64),
            retried_records,
            deferred_ios,
            dropped_busy_ios,
            log_lines_suppressed,
            verify,
            per_cpu,
            counters: Vec::new(),
            totals: Vec::new(),
            stopped_early: ordered.iter().any(|r| r.stopped_early),
            stages: None,
            read_latency: read_hist,
            write_latency: write_hist,
            trim_latency: trim_hist,
            detail,
            steady: ordered.iter().find_map(|r| r.steady.clone()),
            steady_attained_cpus: ordered
                .iter()
                .filter(|r| r.steady.as_ref().is_some_and(|o| o.attained))
                .count() as u32,
            latency_depths: ordered.iter().filter_map(|r| r.latency_depth).collect(),
            rate_min_missed: ordered.iter().find_map(|r| r.rate_min_missed.map(|miss| (r.cpu, miss))),
            clones,
        })
    }

    /// Adds a kernel counter with one value per planned CPU (in plan order).
    pub fn add_counter(&mut self, name: &str, per_cpu: Vec<u64>) -> Result<(), WorkloadError> {
        if per_cpu.len() != self.per_cpu.len() {
            return Err(WorkloadError::ResultsMismatch {
                job: self.plan.spec.name.clone(),
                reason: "a counter row must have one value per planned CPU",
            });
        }
        self.counters.push(CounterRow {
            name: name.to_string(),
            per_cpu,
        });
        Ok(())
    }

    /// Adds a kernel total (one value for the whole job), shown in the human report's
    /// `totals:` line and in the JSON line's `totals` object.
    pub fn add_total(&mut self, name: &str, value: u64) {
        self.totals.push((name.to_string(), value));
    }

    /// Adds the per-stage breakdown (stage tracing), shown after the totals and as `stages` in
    /// the JSON line.
    pub fn set_stages(&mut self, stages: crate::stages::StageSummary) {
        self.stages = Some(stages);
    }

    /// The job's verdict: no I/O error, and verification (if any) passed.
    pub fn passed(&self) -> bool {
        self.errors == 0
            && self.rate_min_missed.is_none()
            && matches!(
                self.verify.result,
                VerifyResult::Off | VerifyResult::Pass | VerifyResult::Written
            )
    }

    /// Writes the fio-like human report (several lines, each ending in a newline).
    pub fn write_human(&self, out: &mut dyn Write) -> fmt::Result {
        let spec = &self.plan.spec;
        let device = &self.plan.device;
        write!(out, "{}: rw={}", spec.name, spec.rw.as_str())?;
        if spec.rw == RwMode::RandRw {
            write!(out, " rwmixread={}", spec.rwmixread)?;
        }
        write!(out, " bs={}", spec.bs)?;
        if let Some(mix) = &spec.bs_mix {
            // Variable sizes: bs is their unit; the sizes themselves in fio's bssplit form.
            out.write_str(" sizes=")?;
            mix.write_in(out, u64::from(spec.bs))?;
        }
        write!(out, " iodepth={}", self.plan.iodepth)?;
        if self.plan.iodepth != spec.iodepth {
            write!(out, " (asked {})", spec.iodepth)?;
        }
        write!(out, " cpus={} device={}", self.plan.cpu_set(), device.name)?;
        // A job over a filename list: every file's device and region, as `:` joins them.
        for file in self.plan.files.iter().skip(1) {
            write!(out, ":{}", file.device.name)?;
        }
        write!(out, " region={}+", self.plan.region_offset)?;
        write_bytes_binary(out, self.plan.region_bytes)?;
        if !self.plan.files.is_empty() {
            out.write_str(" (")?;
            for (index, file) in self.plan.files.iter().enumerate() {
                let separator = if index == 0 { "" } else { ", " };
                write!(out, "{separator}{} {}+", file.device.name, file.offset)?;
                write_bytes_binary(out, file.blocks * u64::from(spec.bs))?;
            }
            out.write_str(")")?;
        }
        writeln!(
            out,
            " verify={} completion={} quiesce={}",
            spec.verify.as_str(),
            spec.completion.map_or("default", |c| c.as_str()),
            spec.quiesce.map_or("default", |q| q.as_str()),
        )?;
        for warning in &self.plan.warnings {
            writeln!(out, "  warning: {warning}")?;
        }
        for (label, direction) in [("read ", &self.read), ("write", &self.write), ("trim ", &self.trim)] {
            if direction.ios > 0 {
                write_direction(out, label, direction)?;
            }
        }
        write_direction(out, "total", &self.total)?;
        write!(out, "  runtime: ")?;
        write_seconds(out, self.runtime_ns)?;
        writeln!(out, "{}", if self.stopped_early { " (stopped early)" } else { "" })?;
        if let Some((cpu, miss)) = &self.rate_min_missed {
            writeln!(
                out,
                "  RATE MIN NOT MET (cpu{cpu}): {miss}; the clone stopped (fio's check_min_rate)"
            )?;
        }
        if let Some(target) = &spec.latency_target {
            writeln!(
                out,
                "  latency target: {} us for {}.{:06}% of I/Os, windows of {} ms: queue depth {} (of {}){}",
                target.target_ns / 1_000,
                target.percentile_millionths / 1_000_000,
                target.percentile_millionths % 1_000_000,
                target.window_ns / 1_000_000,
                self.latency_depths
                    .iter()
                    .map(|d| alloc::format!("{d}"))
                    .collect::<Vec<_>>()
                    .join(","),
                self.plan.iodepth,
                if target.keep_searching { ", latency_run" } else { "" }
            )?;
        }
        if let Some(steady) = &self.steady {
            let windows = if steady.state.summed {
                "the job's window"
            } else {
                "clones' windows"
            };
            writeln!(
                out,
                "  steady state: {} ({windows} attained: {}), {} over {} s, last criterion {:.3}{}, mean {} IOPS",
                if steady.attained { "attained" } else { "not attained" },
                self.steady_attained_cpus,
                steady.state.spelling(),
                steady.state.duration_s,
                steady.criterion,
                if steady.state.percent { "%" } else { "" },
                steady.iops_mean()
            )?;
        }
        self.write_per_cpu_table(out)?;
        self.write_verify(out)?;
        write!(out, "  errors: {}", self.errors)?;
        if let Some((cpu, record)) = self.error_records.first() {
            write!(
                out,
                " (first: cpu{cpu} {} at LBA {}: {}{})",
                record.op.as_str(),
                record.lba,
                record.status(),
                if record.in_verify_pass { ", in verify pass" } else { "" }
            )?;
        }
        writeln!(out)?;
        write_records(out, "failed", &self.error_records, self.error_records_omitted)?;
        if self.retried > 0 {
            writeln!(out, "  retried: {} I/Os re-issued by the driver", self.retried)?;
            write_records(out, "retried", &self.retried_records, self.retried_records_omitted)?;
        }
        if self.deferred_ios > 0 || self.dropped_busy_ios > 0 {
            write!(
                out,
                "  deferred: {} I/Os waited for their block while other I/Os ran",
                self.deferred_ios
            )?;
            if self.dropped_busy_ios > 0 {
                write!(
                    out,
                    "; {} dropped for a block in flight with the queue full",
                    self.dropped_busy_ios
                )?;
            }
            writeln!(out)?;
        }
        if self.log_lines_suppressed > 0 {
            writeln!(
                out,
                "  log: {} lines about failed or retried I/Os suppressed",
                self.log_lines_suppressed
            )?;
        }
        writeln!(out, "  result: {}", if self.passed() { "PASS" } else { "FAIL" })
    }

    fn write_per_cpu_table(&self, out: &mut dyn Write) -> fmt::Result {
        if self.per_cpu.len() > MAX_PER_CPU_COLUMNS {
            self.write_per_cpu_summary(out)?;
        } else {
            self.write_per_cpu_columns(out)?;
        }
        if !self.totals.is_empty() {
            out.write_str("  totals:")?;
            for (name, value) in &self.totals {
                write!(out, " {name}={value}")?;
            }
            writeln!(out)?;
        }
        if let Some(stages) = &self.stages {
            stages.write_human(out)?;
        }
        Ok(())
    }

    /// Many CPUs: one line per row with its minimum, mean and maximum and
    /// the CPUs that hold them, and the CPUs that did no I/O as one list (every
    /// value per CPU is in the JSON line).
    fn write_per_cpu_summary(&self, out: &mut dyn Write) -> fmt::Result {
        writeln!(
            out,
            "  per cpu ({} CPUs; min, mean and max of each row; every CPU's values are in BAREMQ-JSON)",
            self.per_cpu.len()
        )?;
        let cpus: Vec<u32> = self.per_cpu.iter().map(|c| c.cpu).collect();
        type Column = fn(&CpuSummary) -> u64;
        let fixed: [(&str, Column); 4] = [
            ("ios", |c| c.ios),
            ("iops", |c| c.iops),
            ("errors", |c| c.errors),
            ("mismatches", |c| c.mismatches),
        ];
        for (name, value) in fixed {
            let values: Vec<u64> = self.per_cpu.iter().map(value).collect();
            write_row_summary(out, name, &cpus, &values)?;
        }
        for row in &self.counters {
            write_row_summary(out, &row.name, &cpus, &row.per_cpu)?;
        }
        let idle = CpuSet::from_cpus(
            &self
                .per_cpu
                .iter()
                .filter(|c| c.ios == 0)
                .map(|c| c.cpu)
                .collect::<Vec<_>>(),
        );
        if !idle.is_empty() {
            writeln!(out, "    no I/O on cpus {idle}")?;
        }
        Ok(())
    }

    fn write_per_cpu_columns(&self, out: &mut dyn Write) -> fmt::Result {
        const WIDTH: usize = 12;
        write!(out, "  {:<18}", "per cpu")?;
        for cpu in &self.per_cpu {
            write!(out, "{:>WIDTH$}", Cpu(cpu.cpu))?;
        }
        writeln!(out)?;
        type Column = fn(&CpuSummary) -> u64;
        let fixed: [(&str, Column); 4] = [
            ("ios", |c| c.ios),
            ("iops", |c| c.iops),
            ("errors", |c| c.errors),
            ("mismatches", |c| c.mismatches),
        ];
        for (name, value) in fixed {
            write!(out, "    {name:<16}")?;
            for cpu in &self.per_cpu {
                write!(out, "{:>WIDTH$}", value(cpu))?;
            }
            writeln!(out)?;
        }
        for row in &self.counters {
            write!(out, "    {:<16}", row.name)?;
            for value in &row.per_cpu {
                write!(out, "{value:>WIDTH$}")?;
            }
            writeln!(out)?;
        }
        Ok(())
    }

    fn write_verify(&self, out: &mut dyn Write) -> fmt::Result {
        let v = &self.verify;
        if v.result == VerifyResult::Off {
            return writeln!(out, "  verify: off");
        }
        write!(
            out,
            "  verify: {} {}: {} checked, {} unchecked, {} mismatches",
            v.mode.as_str(),
            v.result.as_str(),
            v.checked,
            v.unchecked,
            v.mismatches
        )?;
        if v.skipped > 0 {
            write!(out, ", {} blocks skipped after failed writes", v.skipped)?;
        }
        if let VerifyScheme::ReadOnly(expected) = self.plan.verify {
            write!(out, " (expecting generation {expected})")?;
        }
        if v.pass_skipped {
            write!(out, "; verify pass skipped (job stopped)")?;
        } else if self.plan.verify.has_verify_pass() && self.plan.spec.skip_verify_pass {
            write!(out, "; no verify pass (do_verify=0)")?;
        } else if self.plan.verify.has_verify_pass() {
            write!(out, "; verify pass {} reads in ", v.pass_reads)?;
            write_seconds(out, v.pass_ns)?;
        }
        if v.mode == VerifyMode::Crc32c {
            write!(out, "; crc32c by {}", crate::crc32c::selected().as_str())?;
        }
        writeln!(out)?;
        if let Some((cpu, mismatch)) = &v.first_mismatch {
            writeln!(out, "  FIRST MISMATCH (cpu{cpu}): {mismatch}")?;
        }
        Ok(())
    }

    /// Writes the job's JSON line: [`JSON_PREFIX`], one JSON object, a newline.
    pub fn write_json_line(&self, out: &mut dyn Write) -> fmt::Result {
        out.write_str(JSON_PREFIX)?;
        self.write_json_object(out)?;
        out.write_char('\n')
    }

    /// The object of [`Self::write_json_line`] alone (no prefix, no newline); the fio document
    /// carries it under each job's `baremq` key.
    pub fn write_json_object(&self, out: &mut dyn Write) -> fmt::Result {
        let mut w = JsonWriter::new(out);
        w.begin_object()?;
        self.write_json_job(&mut w)?;
        let device = &self.plan.device;
        w.key("device")?;
        w.begin_object()?;
        w.field_str("name", &device.name)?;
        w.field_u64("sector_size", u64::from(device.sector_size))?;
        w.field_u64(
            "capacity_bytes",
            device.capacity_sectors.saturating_mul(u64::from(device.sector_size)),
        )?;
        w.field_u64("max_iodepth", u64::from(device.max_iodepth))?;
        w.field_u64("max_transfer_bytes", u64::from(device.max_transfer_bytes))?;
        w.end_object()?;
        w.field_u64("runtime_ns", self.runtime_ns)?;
        w.field_u64("ios", self.total.ios)?;
        w.field_u64("iops", self.total.iops)?;
        w.field_u64("bytes", self.total.bytes)?;
        w.field_u64("bw_bytes", self.total.bw_bytes)?;
        w.field_u64("errors", self.errors)?;
        w.key("lat_ns")?;
        write_json_latency(&mut w, &self.total.latency)?;
        for (name, direction) in [("read", &self.read), ("write", &self.write), ("trim", &self.trim)] {
            w.key(name)?;
            w.begin_object()?;
            w.field_u64("ios", direction.ios)?;
            w.field_u64("bytes", direction.bytes)?;
            w.field_u64("errors", direction.errors)?;
            w.field_u64("iops", direction.iops)?;
            w.field_u64("bw_bytes", direction.bw_bytes)?;
            w.key("lat_ns")?;
            write_json_latency(&mut w, &direction.latency)?;
            w.end_object()?;
        }
        self.write_json_verify(&mut w)?;
        let sector_size = u64::from(self.plan.device.sector_size);
        w.key("error_records")?;
        write_json_records(&mut w, &self.error_records, sector_size)?;
        w.field_u64("error_records_omitted", self.error_records_omitted)?;
        w.field_u64("retried", self.retried)?;
        w.key("retried_records")?;
        write_json_records(&mut w, &self.retried_records, sector_size)?;
        w.field_u64("retried_records_omitted", self.retried_records_omitted)?;
        w.field_u64("deferred_ios", self.deferred_ios)?;
        w.field_u64("dropped_busy_ios", self.dropped_busy_ios)?;
        w.field_u64("log_lines_suppressed", self.log_lines_suppressed)?;
        w.key("per_cpu")?;
        w.begin_array()?;
        for cpu in &self.per_cpu {
            w.begin_object()?;
            w.field_u64("cpu", u64::from(cpu.cpu))?;
            w.field_u64("ios", cpu.ios)?;
            w.field_u64("iops", cpu.iops)?;
            w.field_u64("bytes", cpu.bytes)?;
            w.field_u64("errors", cpu.errors)?;
            w.field_u64("mismatches", cpu.mismatches)?;
            w.field_u64("runtime_ns", cpu.runtime_ns)?;
            w.end_object()?;
        }
        w.end_array()?;
        w.key("counters")?;
        w.begin_array()?;
        for row in &self.counters {
            w.begin_object()?;
            w.field_str("name", &row.name)?;
            w.key("per_cpu")?;
            w.begin_array()?;
            for &value in &row.per_cpu {
                w.u64(value)?;
            }
            w.end_array()?;
            w.end_object()?;
        }
        w.end_array()?;
        w.key("totals")?;
        w.begin_object()?;
        for (name, value) in &self.totals {
            w.field_u64(name, *value)?;
        }
        w.end_object()?;
        w.key("stages")?;
        match &self.stages {
            Some(stages) => stages.write_json(&mut w)?,
            None => w.null()?,
        }
        w.key("warnings")?;
        w.begin_array()?;
        for warning in &self.plan.warnings {
            w.display(warning)?;
        }
        w.end_array()?;
        w.field_bool("stopped_early", self.stopped_early)?;
        w.field_str("result", if self.passed() { "pass" } else { "fail" })?;
        w.end_object()
    }

    fn write_json_job(&self, w: &mut JsonWriter<'_, dyn Write + '_>) -> fmt::Result {
        let spec = &self.plan.spec;
        w.key("job")?;
        w.begin_object()?;
        w.field_str("name", &spec.name)?;
        w.field_str("rw", spec.rw.as_str())?;
        w.field_u64(
            "rwmixread",
            u64::from(if spec.rw == RwMode::RandRw {
                spec.rwmixread
            } else if spec.rw.reads() {
                100
            } else {
                0
            }),
        )?;
        w.field_u64("bs", u64::from(spec.bs))?;
        if let Some(mix) = &spec.bs_mix {
            let mut sizes = String::new();
            mix.write_in(&mut sizes, u64::from(spec.bs))?;
            w.field_str("bs_sizes", &sizes)?;
        }
        w.field_u64("iodepth", u64::from(self.plan.iodepth))?;
        w.field_u64("iodepth_requested", u64::from(spec.iodepth))?;
        w.key("cpus")?;
        w.begin_array()?;
        for slice in &self.plan.cpus {
            w.u64(u64::from(slice.cpu))?;
        }
        w.end_array()?;
        w.key("runtime_ns")?;
        match spec.runtime_ns {
            Some(runtime) => w.u64(runtime)?,
            None => w.null()?,
        }
        w.field_u64("size", self.plan.region_bytes)?;
        w.field_u64("offset", self.plan.region_offset)?;
        w.field_str("device", &self.plan.device.name)?;
        w.field_str("verify", spec.verify.as_str())?;
        w.key("verify_generation")?;
        match self.plan.verify {
            VerifyScheme::ReadOnly(ExpectedGeneration::Exact(generation)) => w.u64(u64::from(generation))?,
            VerifyScheme::ReadOnly(ExpectedGeneration::Any) => w.string("any")?,
            _ => w.null()?,
        }
        w.field_str("completion", spec.completion.map_or("default", |c| c.as_str()))?;
        w.field_str("quiesce", spec.quiesce.map_or("default", |q| q.as_str()))?;
        w.field_u64("seed", spec.seed)?;
        w.field_bool("stop_on_error", spec.stop_on_error)?;
        w.field_u64("io_timeout_ns", spec.io_timeout_ns)?;
        w.end_object()
    }

    fn write_json_verify(&self, w: &mut JsonWriter<'_, dyn Write + '_>) -> fmt::Result {
        let v = &self.verify;
        w.key("verify")?;
        w.begin_object()?;
        w.field_str("mode", v.mode.as_str())?;
        // Which CRC32C implementation this CPU used (`sse4.2` or `table`), for reading the figures.
        if v.mode == VerifyMode::Crc32c {
            w.field_str("crc32c_impl", crate::crc32c::selected().as_str())?;
        }
        w.field_str("result", v.result.as_str())?;
        w.field_u64("checked", v.checked)?;
        w.field_u64("unchecked", v.unchecked)?;
        w.field_u64("skipped", v.skipped)?;
        w.field_u64("mismatches", v.mismatches)?;
        w.key("first_mismatch")?;
        match &v.first_mismatch {
            None => w.null()?,
            Some((cpu, mismatch)) => {
                w.begin_object()?;
                w.field_u64("cpu", u64::from(*cpu))?;
                w.field_u64("lba", mismatch.lba)?;
                w.field_str("field", mismatch.field.key())?;
                if let MismatchField::Data { byte_offset } = mismatch.field {
                    w.field_u64("byte_offset", u64::from(byte_offset))?;
                }
                w.field_u64("expected", mismatch.expected)?;
                w.field_u64("found", mismatch.found)?;
                w.key("message")?;
                w.display(mismatch)?;
                w.end_object()?;
            }
        }
        w.field_u64("pass_reads", v.pass_reads)?;
        w.field_u64("pass_ns", v.pass_ns)?;
        w.field_bool("pass_skipped", v.pass_skipped)?;
        w.end_object()
    }
}

/// The listed records, one line each, then how many were left out.
fn write_records(out: &mut dyn Write, label: &str, records: &[(u32, IoRecord)], omitted: u64) -> fmt::Result {
    for (cpu, record) in records {
        writeln!(out, "    {label}: cpu{cpu} {record}")?;
    }
    if omitted > 0 {
        writeln!(out, "    {label}: {omitted} more not listed")?;
    }
    Ok(())
}

fn write_json_records(
    w: &mut JsonWriter<'_, dyn Write + '_>,
    records: &[(u32, IoRecord)],
    sector_size: u64,
) -> fmt::Result {
    w.begin_array()?;
    for (cpu, record) in records {
        w.begin_object()?;
        w.field_u64("cpu", u64::from(*cpu))?;
        w.field_str("op", record.op.as_str())?;
        w.field_u64("lba", record.lba)?;
        w.field_u64("sectors", u64::from(record.sectors))?;
        w.field_u64("bytes", u64::from(record.sectors).saturating_mul(sector_size))?;
        w.field_str("status", record.result.map_or_else(|e| e.key(), |()| "ok"))?;
        w.key("error")?;
        match record.result {
            Ok(()) => w.null()?,
            Err(error) => w.display(&error)?,
        }
        w.field_u64("retries", u64::from(record.retries))?;
        w.field_bool("verify_pass", record.in_verify_pass)?;
        w.end_object()?;
    }
    w.end_array()
}

fn write_json_latency(w: &mut JsonWriter<'_, dyn Write + '_>, latency: &LatencySummary) -> fmt::Result {
    w.begin_object()?;
    w.field_u64("samples", latency.samples)?;
    for (name, value) in latency.labelled() {
        w.field_u64(name, value)?;
    }
    w.end_object()
}

/// A `cpuN` column label that honours width and alignment.
struct Cpu(u32);

impl fmt::Display for Cpu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&alloc::format!("cpu{}", self.0))
    }
}

fn write_direction(out: &mut dyn Write, label: &str, d: &DirectionSummary) -> fmt::Result {
    write!(out, "  {label}: ios={} iops={} bw=", d.ios, d.iops)?;
    write_rate_binary(out, d.bw_bytes)?;
    write!(out, " (")?;
    write_decimal(out, d.bw_bytes, 1_000_000)?;
    writeln!(out, "MB/s) errors={}", d.errors)?;
    write_latency_line(out, &d.latency)
}

fn write_latency_line(out: &mut dyn Write, latency: &LatencySummary) -> fmt::Result {
    if latency.samples == 0 {
        return writeln!(out, "         lat: no samples");
    }
    // Microseconds read better for device latencies; nanoseconds keep fast null-device numbers exact.
    let micros = latency.mean >= 10_000;
    write!(out, "         lat ({}):", if micros { "us" } else { "ns" })?;
    let labels = ["min", "mean", "p50", "p90", "p99", "p99.9", "p99.99", "max"];
    for (label, (_, value)) in labels.iter().zip(latency.labelled()) {
        write!(out, " {label}=")?;
        if micros {
            write_decimal(out, value, 1_000)?;
        } else {
            write!(out, "{value}")?;
        }
    }
    writeln!(out)
}

/// Writes `value / unit` with one decimal, rounded to nearest.
fn write_decimal(out: &mut dyn Write, value: u64, unit: u64) -> fmt::Result {
    let tenths = (u128::from(value) * 10 + u128::from(unit) / 2) / u128::from(unit);
    write!(out, "{}.{}", tenths / 10, tenths % 10)
}

fn write_seconds(out: &mut dyn Write, ns: u64) -> fmt::Result {
    let millis = (ns + 500_000) / 1_000_000;
    write!(out, "{}.{:03}s", millis / 1000, millis % 1000)
}

fn write_bytes_binary(out: &mut dyn Write, bytes: u64) -> fmt::Result {
    const UNITS: [(&str, u64); 4] = [("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    for (name, size) in UNITS {
        if bytes >= size {
            write_decimal(out, bytes, size)?;
            return out.write_str(name);
        }
    }
    write!(out, "{bytes}B")
}

fn write_rate_binary(out: &mut dyn Write, bytes_per_second: u64) -> fmt::Result {
    write_decimal(out, bytes_per_second, 1 << 20)?;
    out.write_str("MiB/s")
}

/// Formats progress lines for a running job from its [`LiveCounts`], computing rates over the
/// interval since the previous line.
#[derive(Debug, Clone)]
pub struct ProgressMeter {
    start_ns: u64,
    last_ns: u64,
    last: LiveCounts,
}

impl ProgressMeter {
    /// A meter for a job that started at `start_ns`.
    pub fn new(start_ns: u64) -> Self {
        Self {
            start_ns,
            last_ns: start_ns,
            last: LiveCounts::default(),
        }
    }

    /// Writes one progress line for the totals `now` at time `now_ns` and remembers them for the next
    /// line's rates. `verifying` marks lines written while CPUs are in their verify pass.
    pub fn write_line(
        &mut self,
        out: &mut dyn Write,
        job: &str,
        now_ns: u64,
        now: LiveCounts,
        verifying: bool,
    ) -> fmt::Result {
        let interval = now_ns.saturating_sub(self.last_ns);
        let ios = now.ios.saturating_sub(self.last.ios);
        let bytes = now.bytes.saturating_sub(self.last.bytes);
        write!(out, "[{job}] ")?;
        write_seconds(out, now_ns.saturating_sub(self.start_ns))?;
        write!(out, ": {} IOPS, ", per_second(ios, interval))?;
        write_decimal(out, per_second(bytes, interval), 1_000_000)?;
        write!(out, " MB/s, {} ios, {} errors", now.ios, now.errors)?;
        if now.mismatches > 0 {
            write!(out, ", {} MISMATCHES", now.mismatches)?;
        }
        if verifying {
            out.write_str(" (verifying)")?;
        }
        out.write_char('\n')?;
        self.last_ns = now_ns;
        self.last = now;
        Ok(())
    }
}

/// Above this many CPUs the report's per-CPU table becomes one summary line per row.
pub const MAX_PER_CPU_COLUMNS: usize = 16;

/// `    NAME  min V (cpuA)  mean M  max W (cpuB)` over `values[i]` of CPU `cpus[i]`.
fn write_row_summary(out: &mut dyn Write, name: &str, cpus: &[u32], values: &[u64]) -> fmt::Result {
    let pairs = || cpus.iter().copied().zip(values.iter().copied());
    let (Some(min), Some(max)) = (pairs().min_by_key(|p| p.1), pairs().max_by_key(|p| p.1)) else {
        return writeln!(out, "    {name:<16}  (no CPU)");
    };
    let total: u128 = values.iter().map(|&v| u128::from(v)).sum();
    let mean = total / values.len() as u128;
    writeln!(
        out,
        "    {name:<16}  min {} ({})  mean {mean}  max {} ({})",
        min.1,
        Cpu(min.0),
        max.1,
        Cpu(max.0)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_round_to_nearest() {
        assert_eq!(per_second(10, 1_000_000_000), 10);
        assert_eq!(per_second(1, 3_000_000_000), 0);
        assert_eq!(per_second(2, 3_000_000_000), 1);
        assert_eq!(per_second(5, 0), 0);
        assert_eq!(per_second(u64::MAX, 1), u64::MAX);
    }

    #[test]
    fn decimal_helpers() {
        let mut s = String::new();
        write_decimal(&mut s, 1_250_000, 1_000_000).unwrap();
        s.push(' ');
        write_seconds(&mut s, 1_234_567_890).unwrap();
        s.push(' ');
        write_bytes_binary(&mut s, 64 << 20).unwrap();
        s.push(' ');
        write_bytes_binary(&mut s, 100).unwrap();
        assert_eq!(s, "1.3 1.235s 64.0MiB 100B");
    }

    #[test]
    fn progress_line_reports_interval_rates() {
        let mut meter = ProgressMeter::new(1_000);
        let mut s = String::new();
        let first = LiveCounts {
            ios: 1000,
            bytes: 4_096_000,
            errors: 0,
            mismatches: 0,
        };
        meter
            .write_line(&mut s, "j", 1_000 + 1_000_000_000, first, false)
            .unwrap();
        let second = LiveCounts {
            ios: 1500,
            bytes: 6_144_000,
            errors: 2,
            mismatches: 1,
        };
        meter
            .write_line(&mut s, "j", 1_000 + 1_500_000_000, second, true)
            .unwrap();
        assert_eq!(
            s,
            "[j] 1.000s: 1000 IOPS, 4.1 MB/s, 1000 ios, 0 errors\n\
             [j] 1.500s: 1000 IOPS, 4.1 MB/s, 1500 ios, 2 errors, 1 MISMATCHES (verifying)\n"
        );
    }
}
