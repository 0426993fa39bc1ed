//! fio-shaped output of a run: the fio 3.x JSON document (`--output-format=json` / `json+`) on one
//! `BAREMQ-FIO-JSON:` line, fio-like text for the normal format, and averaged fio logs
//! (`write_bw_log`, `write_lat_log`, `write_iops_log` with `log_avg_msec`) as `BAREMQ-LOG:` lines.
//!
//! The document follows fio's `stat.c` (`show_run_stats`, `show_thread_status_json`,
//! `add_ddir_status_json`, `add_ddir_lat_json`): key names, key order and number types (integers
//! where fio prints integers, six-decimal numbers where fio prints doubles), so typed decoders
//! (kubestr's Go structs), fio-plot and fio's `fio_jsonplus_clat2csv` read it. Every figure is
//! measured: latencies come from the fio-layout histograms ([`crate::hist`]), slat/clat/samples/
//! depths/CPU busy time from the detail mode ([`crate::detail`]). What baremq has no equivalent for
//! is fio's constant (`ctx`, `majf`, `minf`, `usr_cpu`, `short_ios`, `drop_ios` are 0: there are no
//! context switches, page faults or user mode). baremq's own report for the job is under `baremq`.

use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt::{self, Write};

use crate::detail::{DEPTH_BUCKETS, DetailOptions, JobDetail, RateSample, SampleStats};
use crate::error::WorkloadError;
use crate::hist::{BUCKETS, FIO_DEFAULT_PERCENTILES, LatencyHistogram, PercentMicros, bucket_bounds, ratio_micros};
use crate::json::JsonWriter;
use crate::report::{JobReport, VerifyResult};
use crate::steady::{SteadyMetric, SteadyOutcome, SteadyTest};

/// Prefix of the line holding the run's fio document.
pub const FIO_JSON_PREFIX: &str = "BAREMQ-FIO-JSON: ";
/// Prefix of a log row: `BAREMQ-LOG: <file name>: <row>`.
pub const LOG_PREFIX: &str = "BAREMQ-LOG: ";
/// fio's limit on `percentile_list` entries (`FIO_IO_U_LIST_MAX_LEN`).
pub const MAX_PERCENTILES: usize = 20;
/// The shortest `log_avg_msec` baremq accepts: rows go over a serial console.
pub const MIN_LOG_AVG_MSEC: u64 = 100;

/// fio's `--output-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FioOutputFormat {
    /// fio's text report.
    #[default]
    Normal,
    /// The JSON document.
    Json,
    /// The JSON document with histogram `bins`.
    JsonPlus,
}

impl FioOutputFormat {
    /// `normal`, `json` or `json+`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Normal => "normal",
            Self::Json => "json",
            Self::JsonPlus => "json+",
        }
    }

    /// Parses fio's name of a format.
    pub fn parse(value: &str) -> Result<Self, WorkloadError> {
        match value {
            "normal" => Ok(Self::Normal),
            "json" => Ok(Self::Json),
            "json+" => Ok(Self::JsonPlus),
            _ => Err(WorkloadError::BadOutputOption {
                key: "output-format",
                value: value.to_string(),
                reason: "baremq writes normal, json or json+ (terse is not supported)",
            }),
        }
    }
}

/// fio's log options. A log is on when its prefix is set (fio: `write_bw_log=PREFIX`; an empty
/// prefix means the job's name).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FioLogOptions {
    /// `write_bw_log`.
    pub bw: Option<String>,
    /// `write_lat_log` (three files: slat, clat, lat).
    pub lat: Option<String>,
    /// `write_iops_log`.
    pub iops: Option<String>,
    /// `log_avg_msec`: the averaging window, at least [`MIN_LOG_AVG_MSEC`] when a log is on.
    pub avg_msec: u64,
}

impl FioLogOptions {
    /// Whether any log is on.
    pub fn any(&self) -> bool {
        self.bw.is_some() || self.lat.is_some() || self.iops.is_some()
    }
}

/// The run options fio's output depends on. The fio front-end fills them from the command line
/// and job files; the kernel passes them to the writers here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FioOutputOptions {
    /// `--output-format`.
    pub output_format: FioOutputFormat,
    /// `--output=FILE`: where the host tool writes the document (the kernel only prints it).
    pub output: Option<String>,
    /// `percentile_list` in millionths of a percent; empty means fio's default list.
    pub percentile_list: Vec<PercentMicros>,
    /// The log options.
    pub logs: FioLogOptions,
    /// The document's `fio version`: `baremq-<version>`.
    pub fio_version: String,
    /// Unix time of the end of the run in ms, when the kernel knows it (0 otherwise).
    pub timestamp_ms: u64,
    /// The `[global]` options as written, for `global options`.
    pub global_options: Vec<(String, String)>,
}

impl Default for FioOutputOptions {
    fn default() -> Self {
        Self {
            output_format: FioOutputFormat::Normal,
            output: None,
            percentile_list: Vec::new(),
            logs: FioLogOptions::default(),
            fio_version: alloc::format!("baremq-{}", env!("CARGO_PKG_VERSION")),
            timestamp_ms: 0,
            global_options: Vec::new(),
        }
    }
}

impl FioOutputOptions {
    /// Checks what fio would accept but baremq cannot honour.
    pub fn validate(&self) -> Result<(), WorkloadError> {
        if self.percentile_list.len() > MAX_PERCENTILES {
            return Err(WorkloadError::BadOutputOption {
                key: "percentile_list",
                value: alloc::format!("{} entries", self.percentile_list.len()),
                reason: "fio takes at most 20 percentiles",
            });
        }
        if let Some(&bad) = self.percentile_list.iter().find(|&&p| p == 0 || p > 100_000_000) {
            return Err(WorkloadError::BadOutputOption {
                key: "percentile_list",
                value: PercentKey(bad).to_string(),
                reason: "a percentile must be above 0 and at most 100",
            });
        }
        if self.logs.any() && self.logs.avg_msec < MIN_LOG_AVG_MSEC {
            return Err(WorkloadError::BadOutputOption {
                key: "log_avg_msec",
                value: self.logs.avg_msec.to_string(),
                reason: "logs go over the serial console, so baremq writes averaged logs only: give log_avg_msec=100 or more",
            });
        }
        Ok(())
    }

    /// What the engine must measure for this output (`JobShared::with_detail`).
    pub fn detail_options(&self) -> DetailOptions {
        DetailOptions {
            log_window_ns: if self.logs.any() {
                self.logs.avg_msec.saturating_mul(1_000_000)
            } else {
                0
            },
            ..DetailOptions::default()
        }
    }

    /// The percentiles to report, sorted as fio sorts them.
    pub fn percentiles(&self) -> Vec<PercentMicros> {
        let mut list = if self.percentile_list.is_empty() {
            FIO_DEFAULT_PERCENTILES.to_vec()
        } else {
            self.percentile_list.clone()
        };
        list.sort_unstable();
        list
    }
}

/// What the fio front-end knows about a job that the report does not: its options as written and
/// its reporting group.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FioJobMeta {
    /// The options set in the job's section, as written (`job options`). When empty, the writer
    /// puts the resolved `rw`, `bs`, `iodepth` and `numjobs` there, which fio-plot needs.
    pub job_options: Vec<(String, String)>,
    /// `groupid`.
    pub groupid: u32,
}

/// One job of the document.
#[derive(Debug, Clone, Copy)]
pub struct FioJob<'a> {
    /// Its report.
    pub report: &'a JobReport,
    /// What the front-end knows about it.
    pub meta: &'a FioJobMeta,
}

impl<'a> FioJob<'a> {
    /// fio's `jobs[]` entries for this job, in order: one per clone when its report carries each
    /// clone's ([`JobReport::clones`]: `numjobs` without `group_reporting`), else the job's one.
    pub fn entries(self) -> impl Iterator<Item = FioJob<'a>> {
        let meta = self.meta;
        let whole = self.report.clones.is_empty().then_some(self);
        whole
            .into_iter()
            .chain(self.report.clones.iter().map(move |report| FioJob { report, meta }))
    }
}

/// fio's `jobs[]` entries of `jobs`, in order ([`FioJob::entries`]).
pub fn fio_entries<'a>(jobs: &[FioJob<'a>]) -> Vec<FioJob<'a>> {
    jobs.iter().flat_map(|job| job.entries()).collect()
}

/// A percentile key as fio prints it (`%f`): `99.990000`.
#[derive(Debug, Clone, Copy)]
pub struct PercentKey(pub PercentMicros);

impl fmt::Display for PercentKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:06}", self.0 / 1_000_000, self.0 % 1_000_000)
    }
}

/// Upper bounds (exclusive) of fio's `latency_ns`, `latency_us` and `latency_ms` classes, in ns;
/// the last `latency_ms` class (`>=2000`) has none.
const LATENCY_CLASS_KEYS: [&str; 10] = ["2", "4", "10", "20", "50", "100", "250", "500", "750", "1000"];
const LATENCY_CLASS_STEPS: [u64; 10] = [2, 4, 10, 20, 50, 100, 250, 500, 750, 1000];

/// Counts per fio latency class: 10 in ns, 10 in µs, 12 in ms (io_u.c `io_u_mark_lat_*`).
///
/// They come from the clat histogram: a bucket that straddles a class boundary (above 128 ns a
/// bucket is 1/64 of its value wide) counts in the class of its lowest value, so a class may be off
/// by part of one bucket's count.
pub fn latency_classes(histogram: &LatencyHistogram) -> [u64; 32] {
    let mut classes = [0u64; 32];
    for index in 0..BUCKETS {
        let count = histogram.bucket_count(index);
        if count == 0 {
            continue;
        }
        classes[latency_class_of(bucket_bounds(index).0)] += count;
    }
    classes
}

fn latency_class_of(ns: u64) -> usize {
    for (scale_index, scale) in [1u64, 1_000, 1_000_000].into_iter().enumerate() {
        for (step_index, step) in LATENCY_CLASS_STEPS.into_iter().enumerate() {
            if ns < step * scale {
                return scale_index * 10 + step_index;
            }
        }
    }
    if ns < 2_000_000_000 { 30 } else { 31 }
}

/// `part` of `total` in percent, in millionths, with fio's floor for non-zero parts (`stat_calc_lat`:
/// 0.01%, `stat_calc_dist`: 0.1%).
fn percent_micros(part: u64, total: u64, floor: u128) -> u128 {
    if total == 0 {
        return 0;
    }
    let value = ratio_micros(u128::from(part) * 100, u128::from(total));
    if part != 0 && value < floor { floor } else { value }
}

/// One direction's figures as fio reports them (read, write or trim): counts, the latency
/// histograms and, with the detail mode, slat/clat and the interval samples.
#[derive(Debug, Clone, Copy)]
pub struct Direction<'a> {
    /// Completed I/Os.
    pub ios: u64,
    /// Bytes moved.
    pub bytes: u64,
    /// Submit-to-completion latency.
    pub lat: &'a LatencyHistogram,
    /// Submission latency (detail mode).
    pub slat: Option<&'a LatencyHistogram>,
    /// Completion latency (detail mode).
    pub clat: Option<&'a LatencyHistogram>,
    /// The interval samples of bandwidth and IOPS (detail mode).
    pub samples: &'a [RateSample],
}

/// A report's read, write and trim figures, in fio's order (its JSON output, the fio server's
/// per-job stats).
pub fn directions(report: &JobReport) -> [Direction<'_>; 3] {
    let detail = report.detail.as_ref();
    [
        Direction {
            ios: report.read.ios,
            bytes: report.read.bytes,
            lat: &report.read_latency,
            slat: detail.map(|d| &d.read_slat),
            clat: detail.map(|d| &d.read_clat),
            samples: detail.map_or(&[], |d| d.read_samples.as_slice()),
        },
        Direction {
            ios: report.write.ios,
            bytes: report.write.bytes,
            lat: &report.write_latency,
            slat: detail.map(|d| &d.write_slat),
            clat: detail.map(|d| &d.write_clat),
            samples: detail.map_or(&[], |d| d.write_samples.as_slice()),
        },
        Direction {
            ios: report.trim.ios,
            bytes: report.trim.bytes,
            lat: &report.trim_latency,
            slat: detail.map(|d| &d.trim_slat),
            clat: detail.map(|d| &d.trim_clat),
            samples: detail.map_or(&[], |d| d.trim_samples.as_slice()),
        },
    ]
}

/// The histogram fio's `latency_*` maps and `clat` percentiles come from: clat when measured, else
/// the submit-to-reap latency.
fn clat_of(report: &JobReport) -> LatencyHistogram {
    let mut merged = LatencyHistogram::new();
    for direction in directions(report) {
        merged.merge(direction.clat.unwrap_or(direction.lat));
    }
    merged
}

/// fio's `error`: 0, EIO (5) for failed I/Os, EILSEQ (84) for a verify mismatch.
fn fio_error(report: &JobReport) -> u64 {
    if report.verify.result == VerifyResult::Fail {
        84
    } else if report.errors > 0 {
        5
    } else {
        0
    }
}

/// Busy share of the submitting CPUs in millionths of a percent (`sys_cpu`).
fn sys_cpu_micros(detail: Option<&JobDetail>) -> u128 {
    detail.map_or(0, |d| {
        ratio_micros(u128::from(d.busy_ns) * 100, u128::from(d.cpu_runtime_ns))
    })
}

fn numjobs(report: &JobReport) -> usize {
    report.plan.cpus.len()
}

/// The job options for `job options`: as written, plus the resolved `rw`, `bs`, `iodepth` and
/// `numjobs` where neither the job nor `[global]` set them (fio-plot skips a document without
/// them); with nothing written, also the resolved `name`, `filename` and runtime.
fn job_options(job: &FioJob<'_>, global: &[(String, String)]) -> Vec<(String, String)> {
    let plan = &job.report.plan;
    let mut options = job.meta.job_options.clone();
    if options.is_empty() {
        options.push(("name".to_string(), plan.spec.name.clone()));
        options.push(("filename".to_string(), alloc::format!("/dev/{}", plan.device.name)));
        if let Some(runtime) = plan.spec.runtime_ns {
            options.push(("runtime".to_string(), alloc::format!("{}ms", runtime / 1_000_000)));
            options.push(("time_based".to_string(), "1".to_string()));
        }
    }
    let resolved = [
        ("rw", plan.spec.rw.as_str().to_string()),
        ("bs", plan.spec.bs.to_string()),
        ("iodepth", plan.iodepth.to_string()),
        ("numjobs", numjobs(job.report).to_string()),
    ];
    for (key, value) in resolved {
        if key == "bs" && plan.spec.bs_mix.is_some() {
            // Variable sizes came from bs, bsrange or bssplit, which the options list holds.
            continue;
        }
        let set = |list: &[(String, String)]| list.iter().any(|(k, _)| k == key);
        if !set(&options) && !set(global) {
            options.push((key.to_string(), value));
        }
    }
    options
}

type W<'a, 'b> = JsonWriter<'a, dyn Write + 'b>;

fn write_string_map(w: &mut W<'_, '_>, entries: &[(String, String)]) -> fmt::Result {
    w.begin_object()?;
    for (key, value) in entries {
        w.field_str(key, value)?;
    }
    w.end_object()
}

fn write_lat_object(
    w: &mut W<'_, '_>,
    histogram: Option<&LatencyHistogram>,
    percentiles: Option<&[PercentMicros]>,
    bins: bool,
) -> fmt::Result {
    w.begin_object()?;
    let samples = histogram.map_or(0, |h| h.samples());
    w.field_u64("min", histogram.map_or(0, |h| h.min()))?;
    w.field_u64("max", histogram.map_or(0, |h| h.max()))?;
    w.field_micros("mean", histogram.map_or(0, |h| h.mean_micros()))?;
    w.field_micros("stddev", histogram.map_or(0, |h| h.stddev_micros()))?;
    w.field_u64("N", samples)?;
    if let (Some(histogram), Some(list)) = (histogram, percentiles)
        && samples > 0
    {
        w.key("percentile")?;
        w.begin_object()?;
        for &percent in list {
            w.key(&PercentKey(percent).to_string())?;
            w.u64(histogram.fio_percentile(percent))?;
        }
        w.end_object()?;
        if bins {
            w.key("bins")?;
            w.begin_object()?;
            for (value, count) in histogram.bins() {
                w.key(&value.to_string())?;
                w.u64(count)?;
            }
            w.end_object()?;
        }
    }
    w.end_object()
}

fn write_direction(
    w: &mut W<'_, '_>,
    direction: Option<&Direction<'_>>,
    runtime_ns: u64,
    percentiles: &[PercentMicros],
    bins: bool,
) -> fmt::Result {
    let ios = direction.map_or(0, |d| d.ios);
    // fio reports a direction's runtime only when it moved data in it.
    let runtime_ns = if ios > 0 { runtime_ns } else { 0 };
    let bytes = direction.map_or(0, |d| d.bytes);
    let bw_bytes = if runtime_ns == 0 {
        0
    } else {
        u64::try_from(u128::from(bytes) * 1_000_000_000 / u128::from(runtime_ns)).unwrap_or(u64::MAX)
    };
    w.begin_object()?;
    w.field_u64("io_bytes", bytes)?;
    w.field_u64("io_kbytes", bytes / 1024)?;
    w.field_u64("bw_bytes", bw_bytes)?;
    w.field_u64("bw", bw_bytes / 1024)?;
    w.field_micros(
        "iops",
        ratio_micros(u128::from(ios) * 1_000_000_000, u128::from(runtime_ns)),
    )?;
    w.field_u64("runtime", runtime_ns / 1_000_000)?;
    w.field_u64("total_ios", ios)?;
    w.field_u64("short_ios", 0)?;
    w.field_u64("drop_ios", 0)?;
    w.key("slat_ns")?;
    write_lat_object(w, direction.and_then(|d| d.slat), None, false)?;
    w.key("clat_ns")?;
    write_lat_object(w, direction.and_then(|d| d.clat), Some(percentiles), bins)?;
    w.key("lat_ns")?;
    write_lat_object(w, direction.map(|d| d.lat), None, false)?;
    let samples = direction.map_or(&[][..], |d| d.samples);
    let bw = SampleStats::of(samples.iter().map(|s| s.bw_kib));
    let iops = SampleStats::of(samples.iter().map(|s| s.iops));
    w.field_u64("bw_min", bw.min)?;
    w.field_u64("bw_max", bw.max)?;
    // fio: the mean sample as a share of the group's aggregate bandwidth, at most 100%. Each job is
    // its own group's aggregate here.
    let aggregate_kib = bw_bytes / 1024;
    let agg = if aggregate_kib == 0 {
        0
    } else {
        (bw.mean_micros() * 100 / u128::from(aggregate_kib)).min(100_000_000)
    };
    w.field_micros("bw_agg", agg)?;
    w.field_micros("bw_mean", bw.mean_micros())?;
    w.field_micros("bw_dev", bw.stddev_micros())?;
    w.field_u64("bw_samples", bw.samples)?;
    w.field_u64("iops_min", iops.min)?;
    w.field_u64("iops_max", iops.max)?;
    w.field_micros("iops_mean", iops.mean_micros())?;
    w.field_micros("iops_stddev", iops.stddev_micros())?;
    w.field_u64("iops_samples", iops.samples)?;
    w.end_object()
}

fn write_distribution(w: &mut W<'_, '_>, keys: [&str; DEPTH_BUCKETS], counts: &[u64; DEPTH_BUCKETS]) -> fmt::Result {
    let total: u64 = counts.iter().sum();
    w.begin_object()?;
    for (key, &count) in keys.into_iter().zip(counts) {
        w.field_micros(key, percent_micros(count, total, 100_000))?;
    }
    w.end_object()
}

const DEPTH_KEYS: [&str; DEPTH_BUCKETS] = ["1", "2", "4", "8", "16", "32", ">=64"];
const BATCH_KEYS: [&str; DEPTH_BUCKETS] = ["0", "4", "8", "16", "32", "64", ">=64"];

fn write_job(w: &mut W<'_, '_>, job: &FioJob<'_>, options: &FioOutputOptions) -> fmt::Result {
    let report = job.report;
    let detail = report.detail.as_ref();
    let percentiles = options.percentiles();
    let bins = options.output_format == FioOutputFormat::JsonPlus;
    let [read, write, trim] = directions(report);
    w.begin_object()?;
    w.field_str("jobname", &report.plan.spec.name)?;
    w.field_u64("groupid", u64::from(job.meta.groupid))?;
    w.field_u64("error", fio_error(report))?;
    w.field_u64("eta", 0)?;
    let elapsed_ns = report.runtime_ns.saturating_add(report.verify.pass_ns);
    w.field_u64("elapsed", elapsed_ns.div_ceil(1_000_000_000))?;
    w.key("job options")?;
    write_string_map(w, &job_options(job, &options.global_options))?;
    w.key("read")?;
    write_direction(w, Some(&read), report.runtime_ns, &percentiles, bins)?;
    w.key("write")?;
    write_direction(w, Some(&write), report.runtime_ns, &percentiles, bins)?;
    w.key("trim")?;
    write_direction(w, Some(&trim), report.runtime_ns, &percentiles, bins)?;
    w.key("sync")?;
    w.begin_object()?;
    w.field_u64("total_ios", 0)?;
    w.key("lat_ns")?;
    write_lat_object(w, None, None, false)?;
    w.end_object()?;
    w.field_u64("job_runtime", report.runtime_ns / 1_000_000)?;
    w.field_micros("usr_cpu", 0)?;
    w.field_micros("sys_cpu", sys_cpu_micros(detail))?;
    w.field_u64("ctx", 0)?;
    w.field_u64("majf", 0)?;
    w.field_u64("minf", 0)?;
    let no_counts = [0u64; DEPTH_BUCKETS];
    w.key("iodepth_level")?;
    write_distribution(w, DEPTH_KEYS, detail.map_or(&no_counts, |d| &d.depth_at_submit))?;
    // Every submission hands the block layer one request.
    let submitted = detail.map_or(0, |d| d.depth_at_submit.iter().sum());
    w.key("iodepth_submit")?;
    write_distribution(w, BATCH_KEYS, &[0, submitted, 0, 0, 0, 0, 0])?;
    w.key("iodepth_complete")?;
    write_distribution(w, BATCH_KEYS, detail.map_or(&no_counts, |d| &d.completions_per_reap))?;
    let clat = clat_of(report);
    let classes = latency_classes(&clat);
    let total = clat.samples();
    for (name, range) in [("latency_ns", 0..10), ("latency_us", 10..20)] {
        w.key(name)?;
        w.begin_object()?;
        for (key, index) in LATENCY_CLASS_KEYS.into_iter().zip(range) {
            w.field_micros(key, percent_micros(classes[index], total, 10_000))?;
        }
        w.end_object()?;
    }
    w.key("latency_ms")?;
    w.begin_object()?;
    for (key, index) in LATENCY_CLASS_KEYS.into_iter().chain(["2000", ">=2000"]).zip(20..32) {
        w.field_micros(key, percent_micros(classes[index], total, 10_000))?;
    }
    w.end_object()?;
    let (depth, target) = latency_fields(report);
    w.field_u64("latency_depth", u64::from(depth))?;
    w.field_u64("latency_target", target.map_or(0, |t| t.target_ns / 1_000))?;
    w.field_micros(
        "latency_percentile",
        target.map_or(100_000_000, |t| u128::from(t.percentile_millionths)),
    )?;
    w.field_u64("latency_window", target.map_or(0, |t| t.window_ns / 1_000))?;
    if let Some(steady) = &report.steady {
        write_steady(w, steady)?;
    }
    let mut own = String::new();
    report.write_json_object(&mut own)?;
    w.key("baremq")?;
    w.raw(&own)?;
    w.end_object()
}

/// fio's `latency_depth` and the latency target, as its reports give them (microseconds): the
/// depth the first clone's search ended at, or the job's iodepth without a target.
fn latency_fields(report: &JobReport) -> (u32, Option<&crate::job::LatencyTarget>) {
    let target = report.plan.spec.latency_target.as_ref();
    let depth = match (target, report.latency_depths.first()) {
        (Some(_), Some(&depth)) => depth,
        _ => report.plan.iodepth,
    };
    (depth, target)
}

/// fio's `steadystate` object: the criterion, whether it was attained, the last figures
/// computed and the window's samples, oldest first.
fn write_steady(w: &mut W<'_, '_>, steady: &SteadyOutcome) -> fmt::Result {
    w.key("steadystate")?;
    w.begin_object()?;
    w.key("ss")?;
    w.display(&steady.state.spelling())?;
    w.field_u64("duration", u64::from(steady.state.duration_s))?;
    w.field_u64("attained", u64::from(steady.attained))?;
    w.key("criterion")?;
    // fio prints the criterion as a C float with `%f`.
    let criterion = if steady.criterion.is_finite() {
        steady.criterion
    } else {
        0.0
    };
    w.display(&format_args!(
        "{:.6}{}",
        criterion as f32,
        if steady.state.percent { "%" } else { "" }
    ))?;
    w.key("max_deviation")?;
    w.float(steady.max_deviation)?;
    w.key("slope")?;
    w.float(steady.slope)?;
    w.key("data")?;
    w.begin_object()?;
    w.field_u64("bw_mean", steady.bw_mean())?;
    w.field_u64("iops_mean", steady.iops_mean())?;
    for (name, samples) in [("iops", &steady.iops), ("bw", &steady.bw)] {
        w.key(name)?;
        w.begin_array()?;
        for &sample in samples.iter() {
            w.u64(sample)?;
        }
        w.end_array()?;
    }
    w.end_object()?;
    w.end_object()
}

/// Writes the run's fio document (one line of JSON, no newline).
pub fn write_fio_document(out: &mut dyn Write, options: &FioOutputOptions, jobs: &[FioJob<'_>]) -> fmt::Result {
    let mut w = JsonWriter::new(out);
    w.begin_object()?;
    w.field_str("fio version", &options.fio_version)?;
    w.field_u64("timestamp", options.timestamp_ms / 1000)?;
    w.field_u64("timestamp_ms", options.timestamp_ms)?;
    w.key("time")?;
    w.display(&CTime(options.timestamp_ms / 1000))?;
    w.key("global options")?;
    write_string_map(&mut w, &options.global_options)?;
    w.key("jobs")?;
    w.begin_array()?;
    for job in &fio_entries(jobs) {
        write_job(&mut w, job, options)?;
    }
    w.end_array()?;
    w.end_object()
}

/// Writes `BAREMQ-FIO-JSON: {document}` and a newline.
pub fn write_fio_json_line(out: &mut dyn Write, options: &FioOutputOptions, jobs: &[FioJob<'_>]) -> fmt::Result {
    out.write_str(FIO_JSON_PREFIX)?;
    write_fio_document(out, options, jobs)?;
    out.write_char('\n')
}

/// Unix seconds as C's `ctime` writes them, without the newline: `Tue Dec  1 11:43:34 2026` (UTC).
#[derive(Debug, Clone, Copy)]
pub struct CTime(pub u64);

impl fmt::Display for CTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
        const MONTHS: [&str; 12] = [
            "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
        ];
        let days = self.0 / 86_400;
        let seconds = self.0 % 86_400;
        // Civil date from days since 1970-01-01 (the proleptic Gregorian calendar, era by era).
        let z = days as i64 + 719_468;
        let era = z.div_euclid(146_097);
        let day_of_era = z - era * 146_097;
        let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
        let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
        let month_index = (5 * day_of_year + 2) / 153;
        let day = day_of_year - (153 * month_index + 2) / 5 + 1;
        let month = if month_index < 10 {
            month_index + 3
        } else {
            month_index - 9
        };
        let year = year_of_era + era * 400 + i64::from(month <= 2);
        write!(
            f,
            "{} {} {:2} {:02}:{:02}:{:02} {}",
            DAYS[(days % 7) as usize],
            MONTHS[(month - 1) as usize],
            day,
            seconds / 3600,
            seconds / 60 % 60,
            seconds % 60,
            year
        )
    }
}

/// Writes the averaged log rows of every job as `BAREMQ-LOG: <file>: <row>` lines, in fio's file
/// naming (`<prefix>_bw.<N>.log`, `_iops`, `_slat`, `_clat`, `_lat`; N numbers the job's CPUs across
/// the run from 1, as fio numbers its threads) and row format (`time, value, ddir, 0, 0`; values
/// in KiB/s, IOPS or ns). A log without a prefix is named after its job.
pub fn write_log_lines(out: &mut dyn Write, options: &FioOutputOptions, jobs: &[FioJob<'_>]) -> fmt::Result {
    let logs = &options.logs;
    let mut thread_number = 0usize;
    for job in jobs {
        let Some(detail) = &job.report.detail else {
            thread_number += numjobs(job.report);
            continue;
        };
        let name_of = |prefix: &Option<String>| -> Option<String> {
            prefix.as_ref().map(|p| {
                if p.is_empty() || p == "1" {
                    job.report.plan.spec.name.clone()
                } else {
                    p.clone()
                }
            })
        };
        let (bw, lat, iops) = (name_of(&logs.bw), name_of(&logs.lat), name_of(&logs.iops));
        for cpu in &detail.per_cpu {
            thread_number += 1;
            for (ddir, direction) in [(0, &cpu.read), (1, &cpu.write), (2, &cpu.trim)] {
                for row in &direction.log {
                    let mut emit = |prefix: &str, kind: &str, value: u64| {
                        writeln!(
                            out,
                            "{LOG_PREFIX}{prefix}_{kind}.{thread_number}.log: {}, {value}, {ddir}, 0, 0",
                            row.time_ms
                        )
                    };
                    if let Some(prefix) = &bw {
                        emit(prefix, "bw", row.rate.bw_kib)?;
                    }
                    if let Some(prefix) = &iops {
                        emit(prefix, "iops", row.rate.iops)?;
                    }
                    // fio writes a latency row only for windows that completed I/O.
                    if let Some(prefix) = &lat
                        && row.latency_samples > 0
                    {
                        emit(prefix, "slat", row.slat_mean_ns)?;
                        emit(prefix, "clat", row.clat_mean_ns)?;
                        emit(prefix, "lat", row.lat_mean_ns)?;
                    }
                }
            }
        }
    }
    Ok(())
}

/// `value` with fio's unit prefixes, about 3 significant digits: `950`, `12.3k`, `1.50M`.
struct Scaled {
    value: u64,
    base: u64,
    units: &'static [&'static str],
}

impl fmt::Display for Scaled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut unit = 0;
        let mut divisor = 1u128;
        while unit + 1 < self.units.len() && u128::from(self.value) / divisor >= 10_000 {
            divisor *= u128::from(self.base);
            unit += 1;
        }
        let hundredths = u128::from(self.value) * 100 / divisor;
        if unit == 0 {
            write!(f, "{}{}", self.value, self.units[0])
        } else if hundredths >= 10_000 {
            write!(f, "{}{}", hundredths / 100, self.units[unit])
        } else if hundredths >= 1_000 {
            write!(f, "{}.{}{}", hundredths / 100, hundredths / 10 % 10, self.units[unit])
        } else {
            write!(f, "{}.{:02}{}", hundredths / 100, hundredths % 100, self.units[unit])
        }
    }
}

fn count_text(value: u64) -> Scaled {
    Scaled {
        value,
        base: 1000,
        units: &["", "k", "M", "G", "T"],
    }
}

fn bytes_text(value: u64) -> Scaled {
    Scaled {
        value,
        base: 1024,
        units: &["B", "KiB", "MiB", "GiB", "TiB"],
    }
}

/// fio's `steadystate` line: attained or not, the window's mean bandwidth and IOPS, and the last
/// criterion computed.
fn write_steady_text(out: &mut dyn Write, steady: &SteadyOutcome) -> fmt::Result {
    let bw = steady.bw_mean();
    let metric = match steady.state.metric {
        SteadyMetric::Iops => "iops",
        SteadyMetric::Bandwidth => "bw",
    };
    let test = match steady.state.test {
        SteadyTest::Slope => " slope",
        SteadyTest::Deviation => " mean dev",
    };
    writeln!(
        out,
        "  steadystate  : attained={}, bw={}/s ({}B/s), iops={}, {metric}{test}={:.3}{}",
        if steady.attained { "yes" } else { "no" },
        bytes_text(bw),
        count_text(bw),
        count_text(steady.iops_mean()),
        steady.criterion,
        if steady.state.percent { "%" } else { "" }
    )
}

fn micros_text(value: u128) -> impl fmt::Display {
    struct Two(u128);
    impl fmt::Display for Two {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            let hundredths = (self.0 + 5_000) / 10_000;
            write!(f, "{}.{:02}", hundredths / 100, hundredths % 100)
        }
    }
    Two(value)
}

fn write_lat_text(out: &mut dyn Write, name: &str, histogram: &LatencyHistogram) -> fmt::Result {
    if histogram.samples() == 0 {
        return Ok(());
    }
    // fio picks the unit from the figures (display_lat): msec, usec or nsec.
    let (unit, divisor) = if histogram.min() > 1_000_000 && histogram.max() > 99_999_999 {
        ("msec", 1_000_000u64)
    } else if histogram.min() > 1_000 && histogram.max() > 99_999 {
        ("usec", 1_000)
    } else {
        ("nsec", 1)
    };
    writeln!(
        out,
        "    {name} ({unit}): min={}, max={}, avg={}, stdev={}",
        histogram.min() / divisor,
        histogram.max() / divisor,
        micros_text(histogram.mean_micros() / u128::from(divisor)),
        micros_text(histogram.stddev_micros() / u128::from(divisor)),
    )
}

fn write_direction_text(
    out: &mut dyn Write,
    name: &str,
    direction: &Direction<'_>,
    runtime_ns: u64,
    percentiles: &[PercentMicros],
) -> fmt::Result {
    if direction.ios == 0 || runtime_ns == 0 {
        return Ok(());
    }
    let per_second =
        |count: u64| u64::try_from(u128::from(count) * 1_000_000_000 / u128::from(runtime_ns)).unwrap_or(u64::MAX);
    let bw = per_second(direction.bytes);
    writeln!(
        out,
        "  {name}: IOPS={}, BW={}/s ({}B/s)({}/{}msec)",
        count_text(per_second(direction.ios)),
        bytes_text(bw),
        count_text(bw),
        bytes_text(direction.bytes),
        runtime_ns / 1_000_000
    )?;
    if let Some(slat) = direction.slat {
        write_lat_text(out, "slat", slat)?;
    }
    let clat = direction.clat.unwrap_or(direction.lat);
    write_lat_text(out, "clat", clat)?;
    write_lat_text(out, " lat", direction.lat)?;
    if clat.samples() > 0 {
        let (unit, divisor) = if clat.min() > 2_000_000 && clat.max() > 99_999_999 {
            ("msec", 1_000_000)
        } else if clat.min() > 2_000 && clat.max() > 99_999 {
            ("usec", 1_000)
        } else {
            ("nsec", 1)
        };
        writeln!(out, "    clat percentiles ({unit}):")?;
        for row in percentiles.chunks(4) {
            out.write_str("     |")?;
            for (index, &percent) in row.iter().enumerate() {
                let value = clat.fio_percentile(percent).div_ceil(divisor);
                let hundredths = percent / 10_000;
                write!(
                    out,
                    " {:2}.{:02}th=[{value}]{}",
                    hundredths / 100,
                    hundredths % 100,
                    if index + 1 < row.len() { "," } else { "" }
                )?;
            }
            out.write_char('\n')?;
        }
    }
    if !direction.samples.is_empty() {
        let bw = SampleStats::of(direction.samples.iter().map(|s| s.bw_kib));
        let iops = SampleStats::of(direction.samples.iter().map(|s| s.iops));
        writeln!(
            out,
            "   bw (  KiB/s): min={}, max={}, avg={}, stdev={}, samples={}",
            bw.min,
            bw.max,
            micros_text(bw.mean_micros()),
            micros_text(bw.stddev_micros()),
            bw.samples
        )?;
        writeln!(
            out,
            "   iops        : min={}, max={}, avg={}, stdev={}, samples={}",
            iops.min,
            iops.max,
            micros_text(iops.mean_micros()),
            micros_text(iops.stddev_micros()),
            iops.samples
        )?;
    }
    Ok(())
}

/// Writes fio's text report (`--output-format=normal`) for the run: per job the header, the
/// per-direction figures, latency classes, CPU, depths and issued counts, then the run status line
/// per direction.
pub fn write_fio_text(out: &mut dyn Write, options: &FioOutputOptions, jobs: &[FioJob<'_>]) -> fmt::Result {
    let percentiles = options.percentiles();
    let mut totals = [(0u64, 0u64); 3];
    for job in &fio_entries(jobs) {
        let report = job.report;
        let detail = report.detail.as_ref();
        writeln!(
            out,
            "{}: (groupid={}, jobs={}): err={:2}: pid=0: {}",
            report.plan.spec.name,
            job.meta.groupid,
            numjobs(report),
            fio_error(report),
            CTime(options.timestamp_ms / 1000)
        )?;
        let dirs = directions(report);
        for (name, direction) in ["read", "write", "trim"].into_iter().zip(&dirs) {
            write_direction_text(out, name, direction, report.runtime_ns, &percentiles)?;
        }
        for (total, direction) in totals.iter_mut().zip(&dirs) {
            total.0 += direction.bytes;
            total.1 = total.1.max(if direction.ios > 0 { report.runtime_ns } else { 0 });
        }
        let clat = clat_of(report);
        let classes = latency_classes(&clat);
        for (unit, range, keys) in [
            ("nsec", 0..10, &LATENCY_CLASS_KEYS[..]),
            ("usec", 10..20, &LATENCY_CLASS_KEYS[..]),
            ("msec", 20..30, &LATENCY_CLASS_KEYS[..]),
        ] {
            let mut shown = false;
            for (key, index) in keys.iter().zip(range) {
                if classes[index] == 0 {
                    continue;
                }
                out.write_str(if shown { ", " } else { "  lat (" })?;
                if !shown {
                    write!(out, "{unit})   : ")?;
                }
                shown = true;
                write!(
                    out,
                    "{key}={}%",
                    micros_text(percent_micros(classes[index], clat.samples(), 10_000))
                )?;
            }
            if shown {
                out.write_char('\n')?;
            }
        }
        writeln!(
            out,
            "  cpu          : usr=0.00%, sys={}%, ctx=0, majf=0, minf=0",
            micros_text(sys_cpu_micros(detail))
        )?;
        let no_counts = [0u64; DEPTH_BUCKETS];
        let depth = detail.map_or(&no_counts, |d| &d.depth_at_submit);
        let depth_total: u64 = depth.iter().sum();
        out.write_str("  IO depths    :")?;
        for (index, (key, &count)) in DEPTH_KEYS.iter().zip(depth).enumerate() {
            let tenths = (percent_micros(count, depth_total, 100_000) + 50_000) / 100_000;
            write!(
                out,
                " {key}={}.{}%{}",
                tenths / 10,
                tenths % 10,
                if index + 1 < DEPTH_BUCKETS { "," } else { "\n" }
            )?;
        }
        writeln!(
            out,
            "     issued rwts: total={},{},{},0 short=0,0,0,0 dropped=0,0,0,0",
            report.read.ios, report.write.ios, report.trim.ios
        )?;
        let (depth, target) = latency_fields(report);
        let percentile = target.map_or(100_000_000, |t| t.percentile_millionths);
        writeln!(
            out,
            "     latency   : target={}, window={}, percentile={}.{:02}%, depth={depth}",
            target.map_or(0, |t| t.target_ns / 1_000),
            target.map_or(0, |t| t.window_ns / 1_000),
            percentile / 1_000_000,
            percentile % 1_000_000 / 10_000,
        )?;
        if let Some(steady) = &report.steady {
            write_steady_text(out, steady)?;
        }
        out.write_char('\n')?;
    }
    writeln!(out, "Run status group 0 (all jobs):")?;
    for (name, (bytes, runtime_ns)) in ["   READ", "  WRITE", "   TRIM"].into_iter().zip(totals) {
        if runtime_ns == 0 {
            continue;
        }
        let bw = u64::try_from(u128::from(bytes) * 1_000_000_000 / u128::from(runtime_ns)).unwrap_or(u64::MAX);
        writeln!(
            out,
            "{name}: bw={}/s ({}B/s), io={}, run={}msec",
            bytes_text(bw),
            count_text(bw),
            bytes_text(bytes),
            runtime_ns / 1_000_000
        )?;
    }
    Ok(())
}
