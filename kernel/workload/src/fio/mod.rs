//! fio's job language with fio's meaning: job files and fio command lines, mapped onto the
//! engine's [`JobSpec`]s, with every fio option baremq does not carry out refused by name.
//!
//! # Flow
//!
//! 1. [`syntax`] reads a job file ([`parse_job_file`]) or command-line words
//!    ([`parse_command_line`]) into sections of raw entries.
//! 2. Each job section gets the `[global]` entries above it, then its own, then the
//!    `overrides` the caller passes (the kernel's `fio.override.KEY=VALUE` words), later ones
//!    winning as in fio.
//! 3. Every entry is mapped ([`FioJob`]); options baremq cannot honour are refused
//!    ([`WorkloadError::FioUnsupported`]), options that change nothing on bare metal are accepted
//!    and listed in [`FioJob::warnings`].
//! 4. The kernel resolves each job against its devices and CPUs ([`FioJob::to_spec`]) and plans
//!    it with [`plan_job`](crate::plan_job) as usual.
//!
//! # Scheduling
//!
//! fio starts the jobs of a file together, except where `stonewall` (or `wait_for_previous`)
//! makes a job wait for all before it, or `wait_for=NAME` for one. The front-end cuts the jobs
//! into waves ([`FioJob::wave`]): the jobs of a wave start together (the kernel runs them at the
//! same time, each on CPUs of its own), and a wave starts when the one before it has finished.
//! A new wave starts at each `stonewall`, and at a `wait_for` that names the only job of the
//! current wave (exactly fio's order). A `wait_for` naming a job that runs beside others would
//! need a job to start while others continue; it is refused by name. [`FioJob::group`] is fio's
//! reporting group.

pub mod pattern;
pub mod syntax;
pub mod values;

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use crate::error::WorkloadError;
use crate::job::{
    BlockSizeMix, DEFAULT_SEED, FileRegion, JobSpec, MAX_BS, MAX_IODEPTH, RwMode, SizeChoice, VerifyMode,
};
use crate::plan::DeviceInfo;
use crate::values::CpuSet;
use syntax::{Entry, Section};
pub use values::FioEnv;
use values::{BOOL_FORM, Percentile, SIZE_FORM, SizeOrPercent, TIME_FORM};

/// Which document the run prints (fio's `--output-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutputFormat {
    /// fio's human text (baremq's report).
    #[default]
    Normal,
    /// fio's JSON document.
    Json,
    /// fio's JSON document with latency histogram bins.
    JsonPlus,
}

/// fio's per-job log options (`write_*_log`, `log_avg_msec`, ...), parsed for the output side.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LogOptions {
    /// `write_bw_log=PREFIX`: files `PREFIX_bw.N.log`; a bare key uses the job name.
    pub bw_log: Option<String>,
    /// `write_lat_log=PREFIX`: `PREFIX_slat/_clat/_lat.N.log`.
    pub lat_log: Option<String>,
    /// `write_iops_log=PREFIX`: `PREFIX_iops.N.log`.
    pub iops_log: Option<String>,
    /// `write_hist_log=PREFIX`: `PREFIX_clat_hist.N.log`.
    pub hist_log: Option<String>,
    /// `log_avg_msec`: window of the bw/lat/iops logs (at least [`MIN_LOG_MSEC`] when a log is on).
    pub log_avg_msec: u64,
    /// `log_hist_msec`: window of the histogram log.
    pub log_hist_msec: u64,
}

impl LogOptions {
    /// Whether any log was asked for.
    pub fn any(&self) -> bool {
        self.bw_log.is_some() || self.lat_log.is_some() || self.iops_log.is_some() || self.hist_log.is_some()
    }
}

/// Shortest log window: logs go over the serial console, so per-I/O logs (fio's
/// `log_avg_msec=0`) and windows below this are refused.
pub const MIN_LOG_MSEC: u64 = 100;

/// Options of the whole run that the OUTPUT side consumes (the fio-shaped JSON document and the
/// files xtask writes), parsed here from `--output-format=` / `--output=` / `--readonly`
/// command-line words, from native `output-format=` / `output=` words ([`split_run_words`]) and
/// from a job file's `[global]` sections:
///
/// * `output_format`: the richest JSON asked for (`json+` over `json`), or `Normal`;
///   `normal_too` when a list such as `--output-format=json,normal` also asks for the text.
/// * `output`: the name of the output document (`--output=FILE`), which xtask writes on the
///   host; the kernel only echoes it.
/// * `readonly`: every job that writes is refused (fio's `--readonly`).
/// * `global_options`: the `[global]` entries as written (fio's `"global options"`).
///
/// Per-job report options (`percentile_list`, `*_percentiles`, logs, `group_reporting`) are in
/// [`FioJob::report`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FioRunOptions {
    /// The JSON flavour asked for, or `Normal`.
    pub output_format: OutputFormat,
    /// Whether the normal text was asked for too (`json,normal`).
    pub normal_too: bool,
    /// `--output=FILE`.
    pub output: Option<String>,
    /// `--readonly`.
    pub readonly: bool,
    /// `[global]` entries as written: key and value (`""` for a bare key).
    pub global_options: Vec<(String, String)>,
}

/// Per-job options of fio's report, for the output side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FioReportOptions {
    /// `group_reporting`: one `jobs[]` entry for all clones.
    pub group_reporting: bool,
    /// `percentile_list`; fio's default list when not given.
    pub percentile_list: Vec<Percentile>,
    /// `clat_percentiles` (default on).
    pub clat_percentiles: bool,
    /// `lat_percentiles` (default off).
    pub lat_percentiles: bool,
    /// `slat_percentiles` (default off).
    pub slat_percentiles: bool,
    /// The logs.
    pub logs: LogOptions,
}

/// Which device a job's `filename` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `filename=/dev/NAME` (or a bare device name): the device of that name.
    Device(String),
    /// `filename=/dev/A:/dev/B...`: one job over these devices (fio's several files per job),
    /// in order, at least two.
    Devices(Vec<String>),
    /// A regular file path (fio would measure a file on a file system): the only device.
    File(String),
    /// No `filename` (fio would make a file named after the job): the only device.
    Default,
}

/// One fio job section, mapped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FioJob {
    /// The name as written (`[name]` or `--name=`).
    pub name: String,
    /// `description`.
    pub description: Option<String>,
    /// fio's reporting group (`groupid`): a new one at each `stonewall` or `new_group`.
    pub group: u32,
    /// Jobs of one serial set would start together in fio; a new set starts at each `stonewall`.
    pub serial_set: u32,
    /// The jobs of a wave run at the same time; waves run one after the other (see the module
    /// docs).
    pub wave: u32,
    /// `numjobs`: clones, each a full copy of the job on its own CPU.
    pub numjobs: u32,
    /// `cpus_allowed` / `cpumask`: the CPUs the clones are placed on (one each, in order).
    pub cpus_allowed: Option<CpuSet>,
    /// The device.
    pub target: Target,
    /// `size`/`filesize` when given as a percentage of the device.
    pub size_percent: Option<u8>,
    /// The size was given as `filesize` (the later of `size` and `filesize` wins): with a
    /// `filename` list it is each file's, not split between them.
    pub size_per_file: bool,
    /// `offset` when given as a percentage of the device (rounded down to `bs`).
    pub offset_percent: Option<u8>,
    /// I/Os per pass of a size-bound clone (`number_ios`, or `io_size / bs`); `None`: one per block.
    pub ios_per_pass: Option<u64>,
    /// `loops`: passes (default 1).
    pub loops: u64,
    /// `randrepeat=0` without `randseed`: a seed from the clock, chosen and printed by the kernel.
    pub seed_from_clock: bool,
    /// `ioengine` as written (fio's default `psync` when absent).
    pub ioengine: String,
    /// The engine job; `cpus`, `device`, percentages are filled in by [`FioJob::to_spec`].
    pub spec: JobSpec,
    /// Report options for the output side.
    pub report: FioReportOptions,
    /// The job section's own entries as written (fio's `"job options"`), bare keys with `""`.
    pub options: Vec<(String, String)>,
    /// Accepted options that change nothing on bare metal or differ slightly, one line each.
    pub warnings: Vec<String>,
    /// Every no-op flag set for the job (globals included), for checks across jobs.
    set_keys: Vec<String>,
}

/// A parsed job file or command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FioRun {
    /// Run options (output side).
    pub options: FioRunOptions,
    /// The jobs in fio's order.
    pub jobs: Vec<FioJob>,
}

/// fio engines that do one I/O at a time: fio caps their queue depth at 1.
pub const SYNC_ENGINES: [&str; 6] = ["sync", "psync", "vsync", "pvsync", "pvsync2", "mmap"];
/// fio engines whose `iodepth` baremq honours.
pub const ASYNC_ENGINES: [&str; 10] = [
    "libaio",
    "io_uring",
    "io_uring_cmd",
    "posixaio",
    "windowsaio",
    "solarisaio",
    "spdk",
    "spdk_bdev",
    "xnvme",
    "null",
];

/// Options accepted as no-ops: on a raw device with no page cache, files or processes, they
/// change nothing. Each one accepted is listed in the job's warnings.
pub const NO_OP_OPTIONS: [&str; 22] = [
    "thread",
    "invalidate",
    "gtod_reduce",
    "refill_buffers",
    "scramble_buffers",
    "fallocate",
    "overwrite",
    "iodepth_batch",
    "iodepth_batch_submit",
    "iodepth_batch_complete",
    "iodepth_batch_complete_min",
    "iodepth_batch_complete_max",
    "iodepth_low",
    "exitall",
    "exitall_on_error",
    "softrandommap",
    "random_generator",
    "per_job_logs",
    "cpus_allowed_policy",
    "kb_base",
    "unit_base",
    "log_offset",
];

/// fio options refused with a specific reason (everything else unknown gets a generic one).
const REFUSED: &[(&str, &str)] = &[
    (
        "directory",
        "baremq has no file system; name a device with filename=/dev/NAME",
    ),
    ("nrfiles", "baremq has no file system"),
    ("filename_format", "baremq has no file system"),
    ("openfiles", "baremq has no file system"),
    ("create_on_open", "baremq has no file system"),
    ("unlink", "baremq has no file system"),
    ("fadvise_hint", "baremq has no file system or page cache"),
    ("opendir", "baremq has no file system"),
    ("blocksize_unaligned", "the engine uses bs-aligned blocks"),
    (
        "rate_min",
        "minimum rates (failing a job that is too slow) are not implemented",
    ),
    (
        "rate_iops_min",
        "minimum rates (failing a job that is too slow) are not implemented",
    ),
    (
        "rate_cycle",
        "minimum rates (failing a job that is too slow) are not implemented",
    ),
    ("rate_ignore_thinktime", "rates and think times are separate here"),
    ("thinktime_blocks_type", "think time counts issued I/Os"),
    (
        "verify_backlog_batch",
        "verify_backlog reads back all N blocks at once; batches of them are not implemented",
    ),
    ("verify_interval", "baremq verifies whole blocks"),
    ("verify_offset", "baremq verifies whole blocks"),
    ("verify_async", "baremq verifies on the submitting CPU"),
    (
        "verify_only",
        "a verify-only run of a written job is not implemented; use a read job with verify",
    ),
    ("verify_state_save", "verify state files need a file system"),
    ("verify_state_load", "verify state files need a file system"),
    (
        "trim_percentage",
        "trimming verified blocks (fio's verify trim options) is not implemented",
    ),
    ("zonemode", "zoned devices are not supported"),
    ("flow", "fio's flow control between jobs is not implemented"),
    ("prio", "I/O priorities are not implemented"),
    ("prioclass", "I/O priorities are not implemented"),
    ("nice", "there are no processes to renice"),
    ("lockmem", "there are no processes"),
    ("steadystate", "steady-state detection is not implemented"),
    ("latency_target", "latency targets are not implemented"),
    (
        "spdk_conf",
        "SPDK configuration has no meaning here; name the device with filename=/dev/NAME",
    ),
    ("exec_prerun", "there is no shell to run commands"),
];

/// Most `numjobs` clones of one job.
pub const MAX_NUMJOBS: u64 = 256;

/// fio's default block size.
const DEFAULT_FIO_BS: u64 = 4096;

/// A block size from `parsed`, or the value error `bad` makes.
fn check_bs(parsed: Option<u64>, bad: &dyn Fn(&str) -> WorkloadError) -> Result<u64, WorkloadError> {
    parsed
        .filter(|bs| (1..=MAX_BS).contains(bs))
        .ok_or_else(|| bad(&format!("{SIZE_FORM}, from 1 to {MAX_BS}")))
}

/// One direction of fio's `bssplit`: `SIZE/PERCENT` entries joined by `:`. As fio does, a
/// missing or zero percentage shares what the given ones leave (integer division), a percentage
/// over 100 counts as 100, and the entries end up sorted by ascending share (fio's lookup order).
fn parse_bssplit(text: &str, bad: &dyn Fn(&str) -> WorkloadError) -> Result<Vec<(u64, u32)>, WorkloadError> {
    const FORM: &str = "SIZE/PERCENT entries joined by ':' (e.g. 4k/10:64k/50:32k/40), per direction read,write";
    let mut entries: Vec<(u64, Option<u32>)> = Vec::new();
    for entry in text.split(':').map(str::trim) {
        if entry.is_empty() {
            // fio stops at an empty entry.
            break;
        }
        let (size, percent) = match entry.split_once('/') {
            Some((size, percent)) => {
                let percent: u32 = percent.trim().parse().map_err(|_| bad(FORM))?;
                (size, (percent != 0).then_some(percent.min(100)))
            }
            None => (entry, None),
        };
        entries.push((check_bs(values::size(size.trim()), bad)?, percent));
    }
    if entries.is_empty() {
        return Err(bad(FORM));
    }
    let given: u32 = entries.iter().filter_map(|e| e.1).sum();
    let missing = entries.iter().filter(|e| e.1.is_none()).count() as u32;
    if given > 100 {
        return Err(bad("percentages that add up to at most 100"));
    }
    let share = (100 - given).checked_div(missing).unwrap_or(0);
    let mut split: Vec<(u64, u32)> = entries.into_iter().map(|(bs, p)| (bs, p.unwrap_or(share))).collect();
    split.sort_by_key(|e| e.1);
    Ok(split)
}

fn unsupported(job: &str, option: &str, reason: impl Into<String>) -> WorkloadError {
    WorkloadError::FioUnsupported {
        job: job.to_string(),
        option: option.to_string(),
        reason: reason.into(),
    }
}

/// Parses a fio job file. `overrides` (`key`, `value`; value `""` for a bare key) are applied to
/// every job after its own options, as if appended to each section.
pub fn parse_job_file(text: &str, overrides: &[(&str, &str)]) -> Result<FioRun, WorkloadError> {
    parse_job_file_on(text, overrides, None)
}

/// [`parse_job_file`] on a machine whose figures fio's `$ncpus`, `$mb_memory` and `$pagesize`
/// name (without `env` they are refused).
pub fn parse_job_file_on(
    text: &str,
    overrides: &[(&str, &str)],
    env: Option<&FioEnv>,
) -> Result<FioRun, WorkloadError> {
    let sections = syntax::job_file(text)?;
    build(sections, Vec::new(), overrides, env)
}

/// Parses fio command-line words (`--name=a --rw=randread ...`), with `overrides` as in
/// [`parse_job_file`].
pub fn parse_command_line<'a>(
    words: impl IntoIterator<Item = &'a str>,
    overrides: &[(&str, &str)],
) -> Result<FioRun, WorkloadError> {
    parse_command_line_on(words, overrides, None)
}

/// [`parse_command_line`] with the machine's figures, as [`parse_job_file_on`].
pub fn parse_command_line_on<'a>(
    words: impl IntoIterator<Item = &'a str>,
    overrides: &[(&str, &str)],
    env: Option<&FioEnv>,
) -> Result<FioRun, WorkloadError> {
    let command_line = syntax::command_line(words)?;
    build(command_line.sections, command_line.run, overrides, env)
}

/// Takes the native `output-format=` and `output=` words out of native job words, returning the
/// run options they set and the other words (for [`parse_jobs`](crate::parse_jobs)).
pub fn split_run_words<'a>(words: &[&'a str]) -> Result<(FioRunOptions, Vec<&'a str>), WorkloadError> {
    let mut options = FioRunOptions::default();
    let mut rest = Vec::new();
    for (index, word) in words.iter().enumerate() {
        match word.split_once('=') {
            Some((key @ ("output-format" | "output"), value)) => {
                let entry = Entry {
                    key: key.to_string(),
                    value: Some(value.to_string()),
                    at: format!("word {}", index + 1),
                };
                apply_run_option(&mut options, &entry)?;
            }
            _ => rest.push(*word),
        }
    }
    Ok((options, rest))
}

fn apply_run_option(options: &mut FioRunOptions, entry: &Entry) -> Result<(), WorkloadError> {
    let value = entry.value.as_deref().unwrap_or("");
    let bad = |expected: &str| WorkloadError::FioBadValue {
        job: "run".into(),
        option: entry.key.clone(),
        value: value.to_string(),
        expected: expected.to_string(),
    };
    match entry.key.as_str() {
        "output-format" => {
            let mut format = OutputFormat::Normal;
            let mut normal = false;
            for part in value.split(',') {
                match part.trim() {
                    "normal" => normal = true,
                    "json" if format != OutputFormat::JsonPlus => format = OutputFormat::Json,
                    "json" => {}
                    "json+" => format = OutputFormat::JsonPlus,
                    "terse" => {
                        return Err(unsupported("run", "output-format=terse", "use json, json+ or normal"));
                    }
                    _ => return Err(bad("normal, json, json+, or a comma list of them")),
                }
            }
            options.output_format = format;
            options.normal_too = normal && format != OutputFormat::Normal;
        }
        "output" => {
            let valid = !value.is_empty()
                && value.len() <= 128
                && value.bytes().all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\');
            if !valid {
                return Err(bad("a file name of at most 128 printable characters"));
            }
            options.output = Some(value.to_string());
        }
        "readonly" => {
            options.readonly = match entry.value.as_deref() {
                None => true,
                Some(v) => values::boolean(v).ok_or_else(|| bad(BOOL_FORM))?,
            }
        }
        // Progress display options: baremq prints its own progress line.
        "eta" | "eta-newline" | "eta-interval" => {}
        other => {
            return Err(unsupported(
                "run",
                other,
                "only --output-format, --output, --readonly and --eta* are run options baremq takes",
            ));
        }
    }
    Ok(())
}

fn build(
    sections: Vec<Section>,
    run: Vec<Entry>,
    overrides: &[(&str, &str)],
    env: Option<&FioEnv>,
) -> Result<FioRun, WorkloadError> {
    let mut options = FioRunOptions::default();
    for entry in &run {
        apply_run_option(&mut options, entry)?;
    }
    let override_entries: Vec<Entry> = overrides
        .iter()
        .map(|(key, value)| Entry {
            key: key.to_ascii_lowercase(),
            value: (!value.is_empty()).then(|| value.to_string()),
            at: format!("override {key}"),
        })
        .collect();
    let mut globals: Vec<Entry> = Vec::new();
    let mut jobs: Vec<FioJob> = Vec::new();
    let mut group = 0u32;
    let mut serial_set = 0u32;
    for section in sections {
        if section.global {
            for entry in &section.entries {
                if entry.key == "readonly" {
                    apply_run_option(&mut options, entry)?;
                    continue;
                }
                options
                    .global_options
                    .push((entry.key.clone(), entry.value.clone().unwrap_or_default()));
            }
            globals.extend(section.entries.iter().filter(|e| e.key != "readonly").cloned());
            continue;
        }
        if jobs.iter().any(|j| j.name == section.name) {
            return Err(WorkloadError::DuplicateJobName { name: section.name });
        }
        let mut builder = Builder::new(&section.name, env.copied());
        for entry in globals.iter().chain(&section.entries).chain(&override_entries) {
            builder.apply(entry)?;
        }
        let own = section
            .entries
            .iter()
            .filter(|e| e.key != "name")
            .map(|e| (e.key.clone(), e.value.clone().unwrap_or_default()))
            .collect();
        let first = jobs.is_empty();
        if !first && builder.stonewall {
            serial_set += 1;
        }
        if !first && (builder.stonewall || builder.new_group) {
            group += 1;
        }
        let job = builder.finish(group, serial_set, own, &options)?;
        jobs.push(job);
    }
    if jobs.is_empty() {
        return Err(WorkloadError::FioSyntax {
            at: "the whole input".into(),
            detail: "it defines no job (only [global] options): add a [name] section or --name=".into(),
        });
    }
    assign_waves(&mut jobs)?;
    // exitall stops the jobs running beside the one that ends (or fails); baremq's jobs stop
    // only themselves.
    for wave in (FioRun {
        options: options.clone(),
        jobs: jobs.clone(),
    })
    .waves()
    {
        if wave.len() > 1
            && let Some(job) = wave.iter().find(|j| j.options_have(&["exitall", "exitall_on_error"]))
        {
            return Err(unsupported(
                &job.name,
                "exitall",
                "stopping the other jobs of a wave when one ends is not implemented; put a stonewall between them",
            ));
        }
    }
    Ok(FioRun { options, jobs })
}

/// Cuts the jobs into waves (see the module docs) and checks `wait_for`.
fn assign_waves(jobs: &mut [FioJob]) -> Result<(), WorkloadError> {
    let mut wave = 0u32;
    for index in 0..jobs.len() {
        let wait_for = jobs[index]
            .options
            .iter()
            .rev()
            .find(|(k, _)| k == "wait_for")
            .map(|(_, v)| v.clone());
        let target = match &wait_for {
            Some(target) => match jobs[..index].iter().position(|j| &j.name == target) {
                Some(position) => Some(position),
                None => {
                    return Err(WorkloadError::FioBadValue {
                        job: jobs[index].name.clone(),
                        option: "wait_for".into(),
                        value: target.clone(),
                        expected: "the name of a job written before this one".into(),
                    });
                }
            },
            None => None,
        };
        if index > 0 {
            let previous = &jobs[index - 1];
            let new_set = previous.serial_set != jobs[index].serial_set;
            let current: Vec<usize> = (0..index).filter(|&i| jobs[i].wave == wave).collect();
            let waits_in_wave = target.is_some_and(|t| jobs[t].wave == wave);
            if new_set {
                wave += 1;
            } else if waits_in_wave {
                if current.len() != 1 {
                    return Err(unsupported(
                        &jobs[index].name,
                        "wait_for",
                        format!(
                            "{:?} runs at the same time as other jobs; a job that starts when one of several \
                             running jobs ends is not implemented: use stonewall to wait for all of them",
                            wait_for.unwrap_or_default()
                        ),
                    ));
                }
                wave += 1;
            }
        }
        jobs[index].wave = wave;
    }
    Ok(())
}

/// One job's options being mapped.
struct Builder {
    env: Option<FioEnv>,
    set_keys: Vec<String>,
    name: String,
    spec: JobSpec,
    description: Option<String>,
    numjobs: u32,
    cpus_allowed: Option<CpuSet>,
    target: Target,
    size: Option<SizeOrPercent>,
    size_per_file: bool,
    offset: Option<SizeOrPercent>,
    offset_increment: u64,
    io_size: Option<u64>,
    number_ios: Option<u64>,
    loops: u64,
    time_based: bool,
    runtime_ns: Option<u64>,
    randrepeat: bool,
    randseed: Option<u64>,
    norandommap: bool,
    ioengine: Option<String>,
    iodepth_given: bool,
    direct: bool,
    verify: VerifyMode,
    verify_name: String,
    do_verify: bool,
    continue_on_error: bool,
    stonewall: bool,
    new_group: bool,
    blockalign: Option<u64>,
    /// `bs` per direction `[read, write]` in bytes (fio's default 4k each).
    bs_sizes: [u64; 2],
    /// `bsrange` per direction, `(min, max)` bytes; fio takes it over `bs`.
    bs_range: Option<[(u64, u64); 2]>,
    /// `bssplit` per direction, `(bytes, percent)`; fio takes it over `bs` and `bsrange`.
    bs_split: Option<[Vec<(u64, u32)>; 2]>,
    /// `rate` (bytes/s) and `rate_iops` per direction, `[read, write]`, 0 = none.
    rate_bytes: [u64; 2],
    rate_iops: [u64; 2],
    think_spin_ns: u64,
    end_fsync: bool,
    fsync_on_close: bool,
    /// `file_service_type` as written, when given.
    file_service_given: Option<String>,
    report: FioReportOptions,
    warnings: Vec<String>,
}

impl Builder {
    fn new(name: &str, env: Option<FioEnv>) -> Self {
        let mut spec = JobSpec::with_defaults(&engine_name(name));
        spec.random_map = true;
        Self {
            env,
            set_keys: Vec::new(),
            name: name.to_string(),
            spec,
            description: None,
            numjobs: 1,
            cpus_allowed: None,
            target: Target::Default,
            size: None,
            size_per_file: false,
            offset: None,
            offset_increment: 0,
            io_size: None,
            number_ios: None,
            loops: 1,
            time_based: false,
            runtime_ns: None,
            randrepeat: true,
            randseed: None,
            norandommap: false,
            ioengine: None,
            iodepth_given: false,
            direct: false,
            verify: VerifyMode::None,
            verify_name: String::new(),
            do_verify: true,
            continue_on_error: false,
            stonewall: false,
            new_group: false,
            blockalign: None,
            bs_sizes: [DEFAULT_FIO_BS; 2],
            bs_range: None,
            bs_split: None,
            rate_bytes: [0, 0],
            rate_iops: [0, 0],
            think_spin_ns: 0,
            end_fsync: false,
            fsync_on_close: false,
            file_service_given: None,
            report: FioReportOptions {
                group_reporting: false,
                percentile_list: values::percentiles(values::DEFAULT_PERCENTILES).unwrap_or_default(),
                clat_percentiles: true,
                lat_percentiles: false,
                slat_percentiles: false,
                logs: LogOptions::default(),
            },
            warnings: Vec::new(),
        }
    }

    fn warn(&mut self, text: String) {
        if !self.warnings.contains(&text) {
            self.warnings.push(text);
        }
    }

    fn apply(&mut self, entry: &Entry) -> Result<(), WorkloadError> {
        let key = entry.key.as_str();
        let job = self.name.clone();
        let expanded = self.expand(entry)?;
        let value = expanded.as_deref().or(entry.value.as_deref());
        let text = value.unwrap_or("");
        let bad = |expected: &str| WorkloadError::FioBadValue {
            job: job.clone(),
            option: key.to_string(),
            value: text.to_string(),
            expected: expected.to_string(),
        };
        let need = || {
            value
                .filter(|v| !v.is_empty())
                .ok_or_else(|| bad("a value (key=value)"))
        };
        // A bare key sets a boolean option, as fio's FIO_OPT_STR_SET does.
        let flag = || match value {
            None => Ok(true),
            Some(v) => values::boolean(v).ok_or_else(|| bad(BOOL_FORM)),
        };
        let size = || values::size(need()?).ok_or_else(|| bad(SIZE_FORM));
        let time = |bare| values::time_ns(need()?, bare).ok_or_else(|| bad(TIME_FORM));
        const SECONDS: u64 = 1_000_000_000;
        match key {
            "name" => {}
            "description" => self.description = Some(need()?.trim_matches('"').to_string()),
            "filename" => self.target = target(&job, need()?)?,
            "file_service_type" => {
                let v = need()?;
                self.spec.file_service = file_service(&job, v)?;
                self.file_service_given = Some(v.to_string());
            }
            "ioengine" => {
                let engine = need()?.to_string();
                if !SYNC_ENGINES.contains(&engine.as_str()) && !ASYNC_ENGINES.contains(&engine.as_str()) {
                    return Err(unsupported(
                        &job,
                        &format!("ioengine={engine}"),
                        "baremq runs block I/O on its own drivers; it maps fio's block engines (libaio, io_uring, \
                         posixaio, spdk, xnvme, null, sync, psync, pvsync, pvsync2, vsync, mmap)",
                    ));
                }
                self.ioengine = Some(engine);
            }
            "direct" => self.direct = flag()?,
            "buffered" => self.direct = !flag()?,
            "rw" | "readwrite" => {
                let v = need()?;
                if v.contains(':') {
                    return Err(unsupported(
                        &job,
                        &format!("{key}={v}"),
                        "the :N offset modifier is not implemented",
                    ));
                }
                // fio spells ReadWrite `rw` or `readwrite`; the rest as baremq's native rw=.
                let name = if v == "readwrite" { "rw" } else { v };
                self.spec.rw = RwMode::from_name(name).ok_or_else(|| {
                    bad("read, write, randread, randwrite, randrw, rw, readwrite, trim, randtrim, trimwrite or randtrimwrite")
                })?;
            }
            "rwmixread" | "rwmixwrite" => {
                let percent = values::integer(need()?)
                    .filter(|p| *p <= 100)
                    .ok_or_else(|| bad("a percentage from 0 to 100"))?;
                // fio: when both are given, the later one wins.
                self.spec.rwmixread = if key == "rwmixread" { percent } else { 100 - percent } as u8;
            }
            "bs" | "blocksize" => {
                // fio: one size for every direction, or read,write[,trim] with an empty part
                // meaning fio's default and a missing write part the read one. No baremq job
                // trims, so a trim size is checked and has nothing to apply to.
                let mut parts = need()?.split(',').map(str::trim);
                let mut direction = |fallback: Option<u64>| match parts.next() {
                    None => fallback.map(Ok),
                    Some("") => Some(Ok(DEFAULT_FIO_BS)),
                    Some(part) => Some(check_bs(values::size(part), &bad)),
                };
                let read = direction(Some(DEFAULT_FIO_BS)).unwrap_or(Ok(DEFAULT_FIO_BS))?;
                let write = direction(Some(read)).unwrap_or(Ok(read))?;
                if let Some(trim) = direction(None) {
                    trim?;
                }
                self.bs_sizes = [read, write];
            }
            "bsrange" | "blocksize_range" => {
                // fio: MIN-MAX for every direction, or a read,write list of them.
                let v = need()?;
                let range = |part: &str| -> Result<(u64, u64), WorkloadError> {
                    let (low, high) = part.split_once('-').ok_or_else(|| bad("MIN-MAX, e.g. 4k-64k"))?;
                    let low = check_bs(values::size(low.trim()), &bad)?;
                    let high = check_bs(values::size(high.trim()), &bad)?;
                    // fio swaps reversed ends.
                    Ok((low.min(high), low.max(high)))
                };
                let mut parts = v.split(',').map(str::trim);
                let read = range(parts.next().unwrap_or(""))?;
                let write = match parts.next() {
                    None | Some("") => read,
                    Some(part) => range(part)?,
                };
                if let Some(trim) = parts.next().filter(|p| !p.is_empty()) {
                    range(trim)?;
                }
                self.bs_range = Some([read, write]);
            }
            "bssplit" => {
                // fio: SIZE/PERCENT:SIZE/PERCENT..., or read,write[,trim] lists of them.
                let v = need()?;
                let mut parts = v.split(',').map(str::trim);
                let read = parse_bssplit(parts.next().unwrap_or(""), &bad)?;
                let write = match parts.next() {
                    None => read.clone(),
                    Some(part) => parse_bssplit(part, &bad)?,
                };
                if let Some(trim) = parts.next() {
                    parse_bssplit(trim, &bad)?;
                }
                self.bs_split = Some([read, write]);
            }
            "blockalign" | "ba" => self.blockalign = Some(size()?),
            "iodepth" => {
                self.spec.iodepth = values::integer(need()?)
                    .filter(|d| (1..=MAX_IODEPTH).contains(d))
                    .ok_or_else(|| bad(&format!("an integer from 1 to {MAX_IODEPTH}")))?
                    as u32;
                self.iodepth_given = true;
            }
            "size" | "filesize" => {
                let v = values::size_or_percent(need()?).ok_or_else(|| bad("a size or N% of the device"))?;
                if v == SizeOrPercent::Bytes(0) {
                    return Err(bad("a size above zero"));
                }
                self.size = Some(v);
                self.size_per_file = key == "filesize";
            }
            "offset" => self.offset = Some(values::size_or_percent(need()?).ok_or_else(|| bad("a size or N%"))?),
            "offset_increment" => self.offset_increment = size()?,
            "io_size" | "io_limit" => self.io_size = Some(size()?).filter(|s| *s > 0),
            "number_ios" => self.number_ios = Some(values::integer(need()?).ok_or_else(|| bad("an integer"))?),
            "loops" => {
                self.loops = values::integer(need()?)
                    .filter(|l| *l >= 1)
                    .ok_or_else(|| bad("an integer of at least 1"))?
            }
            "numjobs" => {
                self.numjobs = values::integer(need()?)
                    .filter(|n| (1..=MAX_NUMJOBS).contains(n))
                    .ok_or_else(|| bad(&format!("an integer from 1 to {MAX_NUMJOBS}")))?
                    as u32
            }
            "cpus_allowed" => {
                let set = CpuSet::parse(need()?).ok_or_else(|| bad(crate::values::CPU_LIST_FORM))?;
                self.cpus_allowed = Some(set);
            }
            "cpumask" => {
                let mask = values::integer(need()?).ok_or_else(|| bad("a CPU bit mask, decimal or 0x hex"))?;
                let cpus: Vec<u32> = (0..64).filter(|bit| mask & (1u64 << bit) != 0).collect();
                self.cpus_allowed = Some(CpuSet::from_cpus(&cpus));
            }
            "runtime" | "timeout" => self.runtime_ns = Some(time(SECONDS)?).filter(|ns| *ns > 0),
            "time_based" => self.time_based = flag()?,
            "ramp_time" => self.spec.ramp_ns = time(SECONDS)?,
            "group_reporting" => self.report.group_reporting = flag()?,
            "stonewall" | "wait_for_previous" => self.stonewall = flag()?,
            "new_group" => self.new_group = flag()?,
            "wait_for" => {
                need()?;
            }
            "rate" | "rate_iops" => {
                // `value` or `read,write[,trim]`; an empty part is no limit for that direction.
                let parts: Vec<&str> = need()?.split(',').map(str::trim).collect();
                if parts.len() > 3 {
                    return Err(bad("one value, or read,write[,trim]"));
                }
                let parse = |part: &str| -> Result<u64, WorkloadError> {
                    if part.is_empty() {
                        return Ok(0);
                    }
                    if key == "rate" {
                        values::size(part).ok_or_else(|| bad(&format!("bytes per second: {SIZE_FORM}")))
                    } else {
                        values::integer(part).ok_or_else(|| bad("I/Os per second, an integer"))
                    }
                };
                let read = parse(parts[0])?;
                let write = if parts.len() == 1 { read } else { parse(parts[1])? };
                if parts.len() == 3 && !parts[2].is_empty() {
                    parse(parts[2])?; // trim has no I/Os here (rw=trim is refused)
                }
                if key == "rate" {
                    self.rate_bytes = [read, write];
                } else {
                    self.rate_iops = [read, write];
                }
            }
            "rate_process" => {
                self.spec.rate_poisson = match need()? {
                    "linear" => false,
                    "poisson" => true,
                    _ => return Err(bad("linear or poisson")),
                }
            }
            "thinktime" => self.spec.think_ns = time(1_000)?,
            "thinktime_spin" => self.think_spin_ns = time(1_000)?,
            "thinktime_blocks" => {
                self.spec.think_blocks = values::integer(need()?)
                    .filter(|n| (1..=u64::from(u32::MAX)).contains(n))
                    .ok_or_else(|| bad("an integer of at least 1"))? as u32
            }
            "startdelay" => {
                if need()?.contains('-') {
                    return Err(unsupported(
                        &job,
                        "startdelay",
                        "a random start delay (a range) is not implemented",
                    ));
                }
                self.spec.start_delay_ns = time(SECONDS)?;
            }
            "random_distribution" => {
                let v = need()?;
                self.spec.skew = None;
                self.spec.zones = Vec::new();
                if let Some(zones) = v.strip_prefix("zoned:").or_else(|| v.strip_prefix("zoned_abs:")) {
                    self.spec.zones =
                        parse_zones(zones, v.starts_with("zoned_abs:")).map_err(|expected| bad(&expected))?;
                } else if v != "random" {
                    let (name, parameter) = v.split_once(':').unwrap_or((v, ""));
                    if parameter.contains(':') {
                        return Err(unsupported(
                            &job,
                            &format!("random_distribution={v}"),
                            "a centre (the second parameter) is not implemented",
                        ));
                    }
                    self.spec.skew = Some(parse_skew(name, parameter).ok_or_else(|| {
                        bad("random, zipf:THETA (THETA > 0), pareto:H (0 < H < 1), normal[:DEV%] or gauss[:DEV%], zoned:... or zoned_abs:...")
                    })?);
                }
            }
            "randrepeat" | "rand_repeatable" => self.randrepeat = flag()?,
            "randseed" => self.randseed = Some(values::integer(need()?).ok_or_else(|| bad("an integer"))?),
            "norandommap" => self.norandommap = flag()?,
            "verify" => {
                let v = need()?;
                self.verify = match v {
                    "0" | "none" => VerifyMode::None,
                    "crc32c" | "crc32c-intel" => VerifyMode::Crc32c,
                    "md5" | "crc64" | "crc32" | "crc16" | "crc7" | "xxhash" | "sha1" | "sha256" | "sha512"
                    | "sha3-224" | "sha3-256" | "sha3-384" | "sha3-512" | "meta" => VerifyMode::Crc32c,
                    "pattern" => VerifyMode::FioPattern,
                    "pattern_hdr" | "null" => {
                        return Err(unsupported(
                            &job,
                            &format!("verify={v}"),
                            "baremq verifies with fio's plain pattern (verify=pattern) or its own header and CRC32C \
                             (verify=crc32c)",
                        ));
                    }
                    _ => {
                        return Err(bad(
                            "0, crc32c, crc32c-intel, md5, crc64, crc32, crc16, crc7, xxhash, sha*, meta",
                        ));
                    }
                };
                self.verify_name = v.to_string();
            }
            "verify_pattern" => {
                self.spec.verify_pattern =
                    pattern::parse(need()?).map_err(|why| bad(&format!("{} ({why})", pattern::PATTERN_FORM)))?
            }
            "do_verify" => self.do_verify = flag()?,
            "verify_backlog" => {
                self.spec.verify_backlog = values::integer(need()?)
                    .filter(|n| *n <= 1 << 20)
                    .ok_or_else(|| bad("a number of blocks from 0 (off) to 1048576"))?
                    as u32
            }
            "verify_fatal" => {
                // fio stops at the first error anyway unless continue_on_error; with it, a
                // mismatch still stops the job when verify_fatal is set.
                if flag()? {
                    self.continue_on_error = false;
                }
            }
            "continue_on_error" => {
                self.continue_on_error = match need()? {
                    "none" | "0" => false,
                    "all" | "1" => true,
                    other => {
                        return Err(unsupported(
                            &job,
                            &format!("continue_on_error={other}"),
                            "baremq continues on every error or on none: give all or none",
                        ));
                    }
                }
            }
            "fsync" | "fdatasync" => {
                // On a raw device both flush the device's volatile cache.
                self.spec.flush_every_writes = values::integer(need()?)
                    .filter(|n| *n <= u64::from(u32::MAX))
                    .ok_or_else(|| bad("a number of writes between flushes (0: never)"))?
                    as u32;
            }
            "end_fsync" => self.end_fsync = flag()?,
            "fsync_on_close" => self.fsync_on_close = flag()?,
            "sync" | "write_barrier" => {
                let on = match key {
                    "write_barrier" => values::integer(need()?).ok_or_else(|| bad("an integer (0: never)"))? != 0,
                    _ => !matches!(text, "0" | "none" | "false" | "no" | "off"),
                };
                if on {
                    return Err(unsupported(
                        &job,
                        key,
                        "synchronous (FUA) or barrier writes are not issued by the engine (only 0 / off is accepted)",
                    ));
                }
            }
            "percentile_list" => {
                self.report.percentile_list = values::percentiles(need()?)
                    .ok_or_else(|| bad("up to 20 percentages above 0 and at most 100, separated by :"))?
            }
            "clat_percentiles" => self.report.clat_percentiles = flag()?,
            "lat_percentiles" => self.report.lat_percentiles = flag()?,
            "slat_percentiles" => self.report.slat_percentiles = flag()?,
            "write_bw_log" | "write_lat_log" | "write_iops_log" | "write_hist_log" => {
                let prefix = match value {
                    Some(v) if !v.is_empty() => v.to_string(),
                    _ => self.name.clone(),
                };
                let logs = &mut self.report.logs;
                match key {
                    "write_bw_log" => logs.bw_log = Some(prefix),
                    "write_lat_log" => logs.lat_log = Some(prefix),
                    "write_iops_log" => logs.iops_log = Some(prefix),
                    _ => logs.hist_log = Some(prefix),
                }
            }
            "log_avg_msec" => {
                self.report.logs.log_avg_msec = values::integer(need()?).ok_or_else(|| bad("milliseconds"))?
            }
            "log_hist_msec" => {
                self.report.logs.log_hist_msec = values::integer(need()?).ok_or_else(|| bad("milliseconds"))?
            }
            _ if NO_OP_OPTIONS.contains(&key) => {
                let on = value.is_none_or(|v| values::boolean(v) != Some(false));
                self.set_keys.retain(|k| k != key);
                if on {
                    self.set_keys.push(key.to_string());
                }
                self.warn(format!(
                    "{key}: accepted, changes nothing on baremq (no processes, files or page cache)"
                ));
            }
            _ => {
                let reason = REFUSED
                    .iter()
                    .find(|(k, _)| *k == key)
                    .map(|(_, r)| (*r).to_string())
                    .unwrap_or_else(|| {
                        "baremq does not implement this fio option (or it is not a fio option); docs/fio.md lists \
                         what runs"
                            .into()
                    });
                return Err(unsupported(&job, key, reason));
            }
        }
        Ok(())
    }

    /// fio's arithmetic and `$` keywords in a value, evaluated to a decimal integer (`None`: the
    /// value has none). Text values (names, paths) are taken as written.
    fn expand(&self, entry: &Entry) -> Result<Option<String>, WorkloadError> {
        const TEXT_KEYS: [&str; 8] = [
            "name",
            "description",
            "filename",
            "write_bw_log",
            "write_lat_log",
            "write_iops_log",
            "write_hist_log",
            "wait_for",
        ];
        let Some(value) = entry.value.as_deref() else {
            return Ok(None);
        };
        if TEXT_KEYS.contains(&entry.key.as_str()) || !value.contains(['$', '*', '(']) {
            return Ok(None);
        }
        let bad = |expected: &str| WorkloadError::FioBadValue {
            job: self.name.clone(),
            option: entry.key.clone(),
            value: value.to_string(),
            expected: expected.to_string(),
        };
        if value.contains('$') && self.env.is_none() {
            return Err(bad(
                "a value without $ keywords here (the machine's figures are not known)",
            ));
        }
        values::expression(value, self.env.as_ref())
            .map(|n| Some(n.to_string()))
            .ok_or_else(|| bad(values::EXPRESSION_FORM))
    }

    /// Settles `bs`, `bsrange` and `bssplit` (fio's precedence: bssplit, then bsrange, then bs)
    /// into the spec: one size, or [`BlockSizeMix`] in units of the smallest size.
    fn settle_block_sizes(&mut self, job: &str) -> Result<(), WorkloadError> {
        let directions: [Vec<(u64, u64, u32)>; 2] = if let Some(split) = &self.bs_split {
            split
                .clone()
                .map(|d| d.into_iter().map(|(bytes, percent)| (bytes, bytes, percent)).collect())
        } else if let Some(range) = self.bs_range {
            range.map(|(low, high)| alloc::vec![(low, high, 100)])
        } else {
            self.bs_sizes.map(|bs| alloc::vec![(bs, bs, 100)])
        };
        let unit = directions.iter().flatten().map(|c| c.0).min().unwrap_or(DEFAULT_FIO_BS);
        self.spec.bs = unit as u32; // at most MAX_BS (check_bs), which fits in u32
        let fixed = directions.iter().flatten().all(|c| (c.0, c.1) == (unit, unit));
        if fixed {
            self.spec.bs_mix = None;
            return Ok(());
        }
        let option = if self.bs_split.is_some() {
            "bssplit"
        } else if self.bs_range.is_some() {
            "bsrange"
        } else {
            "bs"
        };
        let mut mix = BlockSizeMix {
            directions: [Vec::new(), Vec::new()],
        };
        for (direction, choices) in directions.iter().enumerate() {
            for &(low, high, percent) in choices {
                // Offsets are multiples of the unit, so every size must be one too. A range draws
                // multiples of its minimum (fio's draw aligned to the minimum size): that is the
                // unit's multiples only when the minimum is the unit.
                if !low.is_multiple_of(unit) || (low != high && low != unit) {
                    return Err(unsupported(
                        job,
                        option,
                        format!(
                            "every block size must be a whole multiple of the job's smallest ({unit} bytes) and every range must start at it; {low} does not fit (offsets are aligned to the smallest size)"
                        ),
                    ));
                }
                // Both at most MAX_BS (check_bs), which fits in u32.
                mix.directions[direction].push(SizeChoice {
                    min_units: (low / unit) as u32,
                    max_units: (high / unit) as u32,
                    percent,
                });
            }
        }
        self.spec.bs_mix = Some(mix);
        Ok(())
    }

    fn finish(
        mut self,
        group: u32,
        serial_set: u32,
        options: Vec<(String, String)>,
        run: &FioRunOptions,
    ) -> Result<FioJob, WorkloadError> {
        let job = self.name.clone();
        self.settle_block_sizes(&job)?;
        let bs = u64::from(self.spec.bs);
        if let Some(align) = self.blockalign
            && align != bs
        {
            return Err(unsupported(
                &job,
                "blockalign",
                format!("offsets are aligned to the smallest block size ({bs}); blockalign must equal it"),
            ));
        }
        if self.spec.bs_mix.is_some() && self.rate_bytes != [0, 0] {
            return Err(unsupported(
                &job,
                "rate",
                "a byte rate with variable block sizes is not implemented (the pacing is per I/O); use rate_iops",
            ));
        }
        if self.spec.bs_mix.is_some() && self.number_ios.is_some() {
            return Err(unsupported(
                &job,
                "number_ios",
                "number_ios with variable block sizes is not implemented (a size-bound job with them counts bytes); use io_size",
            ));
        }
        for direction in 0..2 {
            let (bytes, iops) = (self.rate_bytes[direction], self.rate_iops[direction]);
            self.spec.io_interval_ns[direction] = match (bytes, iops) {
                (0, 0) => 0,
                (0, iops) => 1_000_000_000u64.div_ceil(iops),
                (bytes, 0) => (bs * 1_000_000_000).div_ceil(bytes),
                _ => {
                    return Err(unsupported(
                        &job,
                        "rate_iops",
                        "give rate or rate_iops for a direction, not both",
                    ));
                }
            };
        }
        if self.think_spin_ns > self.spec.think_ns {
            return Err(WorkloadError::FioBadValue {
                job,
                option: "thinktime_spin".into(),
                value: self.think_spin_ns.to_string(),
                expected: "at most thinktime".into(),
            });
        }
        if self.think_spin_ns > 0 {
            self.warn("thinktime_spin: the whole think time is a polling wait here".into());
        }
        // On a device, closing the file and the end of the job are the same moment.
        self.spec.end_flush = self.end_fsync || self.fsync_on_close;
        let engine = self.ioengine.clone().unwrap_or_else(|| "psync".into());
        if SYNC_ENGINES.contains(&engine.as_str()) {
            if self.spec.iodepth > 1 {
                self.warn(format!(
                    "ioengine={engine} is synchronous: queue depth capped at 1 as fio does (iodepth={} ignored)",
                    self.spec.iodepth
                ));
            }
            self.spec.iodepth = 1;
        } else if engine == "null" {
            self.warn("ioengine=null moves no data in fio; baremq does the I/O on the device".into());
        }
        if !self.direct {
            self.warn(
                "direct=0 (fio's default, buffered): baremq has no page cache, every I/O goes to the device".into(),
            );
        }
        // Time: a runtime caps a size-bound job unless time_based.
        if self.time_based && self.runtime_ns.is_none() {
            return Err(WorkloadError::FioBadValue {
                job,
                option: "time_based".into(),
                value: String::new(),
                expected: "a runtime as well (time_based repeats the workload until the runtime)".into(),
            });
        }
        self.spec.runtime_ns = self.runtime_ns;
        self.spec.runtime_is_cap = !self.time_based;
        // Amount of I/O per clone.
        let per_pass = match (self.number_ios, self.io_size) {
            (Some(n), _) => Some(n),
            (None, Some(bytes)) => {
                if !bytes.is_multiple_of(bs) {
                    return Err(WorkloadError::FioBadValue {
                        job,
                        option: "io_size".into(),
                        value: bytes.to_string(),
                        expected: format!("a multiple of bs ({bs})"),
                    });
                }
                Some(bytes / bs)
            }
            (None, None) => None,
        };
        // Where: size, offset, clones.
        let mut size_percent = None;
        match self.size {
            Some(SizeOrPercent::Bytes(b)) => self.spec.size = Some(b),
            Some(SizeOrPercent::Percent(p)) => size_percent = Some(p),
            None => {}
        }
        let mut offset_percent = None;
        match self.offset {
            Some(SizeOrPercent::Bytes(b)) => self.spec.offset = b,
            Some(SizeOrPercent::Percent(p)) => offset_percent = Some(p),
            None => {}
        }
        self.spec.clone_increment = Some(self.offset_increment);
        // Randomness.
        self.spec.random_map = !self.norandommap;
        if let Some(skew) = self.spec.skew.filter(|_| !self.norandommap && self.spec.rw.is_random()) {
            self.warn(format!(
                "random_distribution={skew}: offsets are drawn with repeats (no random map, as in fio)"
            ));
        }
        if !self.spec.zones.is_empty() && !self.norandommap && self.spec.rw.is_random() {
            self.warn(
                "random_distribution=zoned: offsets are drawn with repeats inside each zone (no random map)".into(),
            );
        }
        let seed_from_clock = self.randseed.is_none() && !self.randrepeat;
        self.spec.seed = self.randseed.unwrap_or(DEFAULT_SEED);
        // Verify and errors. fio 3.33: verify_pattern without a verify option checks a header
        // and the pattern (its VERIFY_PATTERN); verify=pattern is the pattern alone.
        if !self.spec.verify_pattern.is_empty() && self.verify_name.is_empty() {
            self.verify = VerifyMode::FioPatternHeader;
            self.verify_name = "pattern".into();
        }
        match (self.verify, self.spec.verify_pattern.is_empty()) {
            (VerifyMode::FioPattern, true) => {
                return Err(WorkloadError::FioBadValue {
                    job,
                    option: "verify".into(),
                    value: "pattern".into(),
                    expected: "a verify_pattern as well (the bytes to write and check)".into(),
                });
            }
            (VerifyMode::Crc32c, false) => {
                return Err(unsupported(
                    &job,
                    "verify_pattern",
                    format!(
                        "with verify={} fio puts its checksum header over the pattern; baremq checks either the \
                         plain pattern (verify=pattern, or no verify option) or its own header and CRC32C",
                        self.verify_name
                    ),
                ));
            }
            (VerifyMode::None, false) => self.spec.verify_pattern.clear(),
            _ => {}
        }
        self.spec.verify = self.verify;
        if self.verify.is_enabled() {
            if !self.do_verify {
                return Err(unsupported(
                    &job,
                    "do_verify",
                    "writing verify data without the verify pass is not implemented; use verify=0 or do_verify=1",
                ));
            }
            if !matches!(self.verify_name.as_str(), "crc32c" | "crc32c-intel" | "pattern") {
                self.warn(format!(
                    "verify={}: baremq checks its own block header and CRC32C, not fio's {} format",
                    self.verify_name, self.verify_name
                ));
            }
        }
        self.spec.stop_on_error = !self.continue_on_error;
        if run.readonly && (self.spec.rw.writes() || self.spec.rw.trims()) {
            return Err(unsupported(
                &job,
                "readonly",
                format!(
                    "rw={} {}",
                    self.spec.rw.as_str(),
                    if self.spec.rw.writes() { "writes" } else { "trims" }
                ),
            ));
        }
        let logs = &self.report.logs;
        if logs.any()
            && logs.log_avg_msec < MIN_LOG_MSEC
            && (logs.bw_log.is_some() || logs.lat_log.is_some() || logs.iops_log.is_some())
        {
            return Err(unsupported(
                &job,
                "log_avg_msec",
                format!(
                    "logs go over the serial console: per-I/O logs are refused, give log_avg_msec={MIN_LOG_MSEC} or more"
                ),
            ));
        }
        if logs.hist_log.is_some() && logs.log_hist_msec < MIN_LOG_MSEC {
            return Err(unsupported(
                &job,
                "log_hist_msec",
                format!("histogram logs go over the serial console: give log_hist_msec={MIN_LOG_MSEC} or more"),
            ));
        }
        if let (Some(given), false) = (&self.file_service_given, matches!(self.target, Target::Devices(_))) {
            self.warn(format!(
                "file_service_type={given}: the job has one file (device), so there is no file to switch to"
            ));
        }
        if let Target::File(path) = &self.target {
            self.warn(format!(
                "filename={path} is a file to fio; baremq has no file system and runs the job on the device itself"
            ));
        }
        Ok(FioJob {
            name: self.name,
            description: self.description,
            group,
            serial_set,
            wave: 0,
            numjobs: self.numjobs,
            cpus_allowed: self.cpus_allowed,
            target: self.target,
            size_percent,
            size_per_file: self.size_per_file,
            offset_percent,
            seed_from_clock,
            ios_per_pass: per_pass,
            loops: self.loops,
            ioengine: engine,
            spec: self.spec,
            report: self.report,
            options,
            warnings: self.warnings,
            set_keys: self.set_keys,
        })
    }
}

/// The engine jobs of one wave (jobs that run at the same time), each on CPUs of its own: the
/// clones of the first job take the first CPUs it may use, the next job's the next ones, and so
/// on. Jobs must be given in order and all belong to one wave.
pub fn wave_specs(jobs: &[FioJob], devices: &[DeviceInfo], online_cpus: &[u32]) -> Result<Vec<JobSpec>, WorkloadError> {
    let mut busy = CpuSet::new();
    let mut specs = Vec::with_capacity(jobs.len());
    for job in jobs {
        let spec = job.to_spec_beside(devices, online_cpus, &busy)?;
        if let crate::job::CpuSelection::List(cpus) = spec.cpus {
            for cpu in cpus.iter() {
                busy.insert(cpu);
            }
        }
        specs.push(spec);
    }
    Ok(specs)
}

impl FioRun {
    /// The jobs cut into waves, in order (see the module docs).
    pub fn waves(&self) -> Vec<&[FioJob]> {
        let mut out = Vec::new();
        let mut start = 0;
        for index in 1..=self.jobs.len() {
            if index == self.jobs.len() || self.jobs[index].wave != self.jobs[start].wave {
                out.push(&self.jobs[start..index]);
                start = index;
            }
        }
        out
    }
}

/// The skewed `random_distribution` `name:parameter` (parameter in thousandths), or `None` when
/// the name or the parameter is not one fio takes.
fn parse_skew(name: &str, parameter: &str) -> Option<crate::skew::Skew> {
    use crate::skew::Skew;
    let milli = |text: &str| -> Option<u32> {
        let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
        if fraction.len() > 3
            || !fraction.bytes().all(|b| b.is_ascii_digit())
            || (whole.is_empty() && fraction.is_empty())
        {
            return None;
        }
        let whole: u32 = if whole.is_empty() { 0 } else { whole.parse().ok()? };
        let fraction: u32 = if fraction.is_empty() {
            0
        } else {
            fraction.parse::<u32>().ok()? * 10u32.pow(3 - fraction.len() as u32)
        };
        whole.checked_mul(1000)?.checked_add(fraction)
    };
    match name {
        "zipf" => Some(Skew::Zipf {
            theta_milli: milli(parameter).filter(|&t| (1..=100_000).contains(&t))?,
        }),
        "pareto" => Some(Skew::Pareto {
            h_milli: milli(parameter).filter(|&h| (1..1000).contains(&h))?,
        }),
        "normal" | "gauss" => Some(Skew::Normal {
            dev_milli: if parameter.is_empty() {
                0
            } else {
                milli(parameter).filter(|&d| d <= 100_000)?
            },
        }),
        _ => None,
    }
}

/// `A/R:A/R...` of `random_distribution=zoned:` (R a percent) or `zoned_abs:` (R a size): the
/// access percents must add up to 100, and for `zoned` the region percents too.
fn parse_zones(text: &str, absolute: bool) -> Result<Vec<crate::job::AccessZone>, String> {
    use crate::job::{AccessZone, ZoneLength};
    let form = if absolute {
        "zoned_abs:ACCESS%/SIZE:..., e.g. zoned_abs:60/1g:40/7g, access percents adding up to 100"
    } else {
        "zoned:ACCESS%/REGION%:..., e.g. zoned:60/10:30/20:10/70, each column adding up to 100"
    };
    if text.contains(',') {
        return Err(alloc::format!("{form} (zones per direction are not implemented)"));
    }
    let mut zones = Vec::new();
    let (mut access, mut region) = (0u64, 0u64);
    for part in text.split(':') {
        let (a, r) = part.split_once('/').ok_or_else(|| form.to_string())?;
        let a = values::integer(a)
            .filter(|a| *a <= 100)
            .ok_or_else(|| form.to_string())?;
        let length = if absolute {
            ZoneLength::Bytes(values::size(r).ok_or_else(|| form.to_string())?)
        } else {
            let r = values::integer(r)
                .filter(|r| *r <= 100)
                .ok_or_else(|| form.to_string())?;
            region += r;
            ZoneLength::Percent(r as u8)
        };
        access += a;
        zones.push(AccessZone {
            access_percent: a as u8,
            length,
        });
    }
    if access != 100 || (!absolute && region != 100) {
        return Err(form.to_string());
    }
    Ok(zones)
}

/// Whether a boot module is a fio job file: its string (QEMU's `-initrd "FILE fio"` entry, GRUB's
/// words after the path) has a word `fio` or a word ending in `.fio` (ASCII case-insensitive), or
/// it has no string at all (QEMU's PVH `-initrd`) and its first line that is neither blank nor a
/// `;`/`#` comment starts with `[`.
pub fn is_job_file_module(string: &str, bytes: &[u8]) -> bool {
    let named = string.split_ascii_whitespace().any(|word| {
        word.eq_ignore_ascii_case("fio")
            || word.len() > 4 && word.as_bytes()[word.len() - 4..].eq_ignore_ascii_case(b".fio")
    });
    let unlabelled_job = string.trim().is_empty()
        && bytes
            .split(|&b| b == b'\n')
            .map(|line| line.trim_ascii())
            .find(|line| !line.is_empty() && !line.starts_with(b";") && !line.starts_with(b"#"))
            .is_some_and(|line| line.starts_with(b"["));
    named || unlabelled_job
}

/// The engine's name for a fio job name: fio allows any text, the engine's reports want
/// `[A-Za-z0-9_.-]`, at most 32 characters; others become `_`.
pub fn engine_name(name: &str) -> String {
    name.chars()
        .take(crate::job::MAX_JOB_NAME)
        .map(|c| {
            if c.is_ascii_alphanumeric() || "_.-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn target(job: &str, value: &str) -> Result<Target, WorkloadError> {
    // fio separates several files with ':' and escapes a literal ':' as '\:'.
    let mut parts = Vec::new();
    let mut current = String::new();
    let mut chars = value.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&':') => {
                current.push(':');
                chars.next();
            }
            ':' => parts.push(core::mem::take(&mut current)),
            _ => current.push(c),
        }
    }
    parts.push(current);
    if parts.len() > 1 {
        let mut devices = Vec::with_capacity(parts.len());
        for part in &parts {
            match part.strip_prefix("/dev/") {
                Some(device) if !device.is_empty() && !device.contains('=') => devices.push(device.to_string()),
                _ => {
                    return Err(unsupported(
                        job,
                        &format!("filename={value}"),
                        format!(
                            "{part:?} in a file list is not a device: baremq has no file system, so a list names \
                             devices only (/dev/A:/dev/B)"
                        ),
                    ));
                }
            }
        }
        return Ok(Target::Devices(devices));
    }
    let name = parts.remove(0);
    if name.contains('=') {
        return Err(unsupported(
            job,
            &format!("filename={value}"),
            "SPDK's trtype=... form is not implemented; name the device with filename=/dev/NAME",
        ));
    }
    Ok(match name.strip_prefix("/dev/") {
        Some(device) => Target::Device(device.to_string()),
        None => Target::File(name),
    })
}

/// fio's `file_service_type=TYPE[:N]`.
fn file_service(job: &str, value: &str) -> Result<crate::job::FileService, WorkloadError> {
    use crate::job::FileService;
    let (name, count) = match value.split_once(':') {
        Some((name, count)) => (name, Some(count)),
        None => (value, None),
    };
    let bad = |expected: &str| WorkloadError::FioBadValue {
        job: job.to_string(),
        option: "file_service_type".into(),
        value: value.to_string(),
        expected: expected.to_string(),
    };
    if matches!(name, "zipf" | "pareto" | "normal" | "gauss") {
        return Err(unsupported(
            job,
            &format!("file_service_type={value}"),
            "skewed file choice is not implemented; use roundrobin, sequential or random",
        ));
    }
    let n = match count {
        None => 1,
        Some(text) => values::integer(text)
            .filter(|n| (1..=u64::from(u32::MAX)).contains(n))
            .ok_or_else(|| bad("roundrobin, sequential or random, with :N (I/Os per file turn, at least 1)"))?
            as u32,
    };
    match name {
        "roundrobin" => Ok(FileService::RoundRobin(n)),
        // fio takes a count after `sequential` too, and a file's turn lasts until it is done
        // whatever the count.
        "sequential" => Ok(FileService::Sequential),
        "random" => Ok(FileService::Random(n)),
        _ => Err(bad(
            "roundrobin, sequential or random, with :N (I/Os per file turn, at least 1)",
        )),
    }
}

impl FioJob {
    /// The device `/dev/NAME` names, or an error listing the devices there are.
    fn named_device<'d>(&self, devices: &'d [DeviceInfo], name: &str) -> Result<&'d DeviceInfo, WorkloadError> {
        devices
            .iter()
            .find(|d| d.name == name)
            .ok_or_else(|| WorkloadError::UnknownDevice {
                job: self.name.clone(),
                device: alloc::format!("/dev/{name}"),
                available: devices.iter().map(|d| d.name.as_str()).collect::<Vec<_>>().join(", "),
            })
    }

    /// A job on one device: names it in `spec` and settles a percentage `offset` and `size` on
    /// its capacity. Returns the region's bytes (twice: it is also the smallest file).
    fn place_on_device(&self, spec: &mut JobSpec, devices: &[DeviceInfo]) -> Result<(u64, u64), WorkloadError> {
        let available = || devices.iter().map(|d| d.name.as_str()).collect::<Vec<_>>().join(", ");
        let device = match &self.target {
            Target::Device(name) => self.named_device(devices, name)?,
            Target::File(_) | Target::Default | Target::Devices(_) => match devices {
                [only] => only,
                _ => {
                    return Err(WorkloadError::MissingDevice {
                        job: self.name.clone(),
                        available: available(),
                    });
                }
            },
        };
        spec.device = Some(device.name.clone());
        let capacity = device.validated_capacity_bytes()?;
        let bs = u64::from(spec.bs);
        if let Some(p) = self.offset_percent {
            spec.offset = capacity / 100 * u64::from(p) / bs * bs;
        }
        if let Some(p) = self.size_percent {
            let room = capacity.saturating_sub(spec.offset);
            spec.size = Some((room / 100 * u64::from(p) / bs * bs).max(bs));
        }
        let region = spec.size.unwrap_or_else(|| capacity.saturating_sub(spec.offset));
        Ok((region, region))
    }

    /// The regions of a job over several devices, as fio 3.33 sizes its files
    /// (`filesetup.c`, `setup_files`): `size` in bytes is split evenly between the files (fio
    /// hands what the division leaves out in whole blocks only, so with whole-block shares the
    /// few bytes left go nowhere), `filesize` is each file's; without either each file runs from
    /// `offset` to its end; a percentage `offset` or `size` is of each device.
    fn file_regions(
        &self,
        names: &[String],
        devices: &[DeviceInfo],
        bs: u64,
    ) -> Result<Vec<FileRegion>, WorkloadError> {
        let count = names.len() as u64;
        let share = match self.spec.size {
            Some(each) if self.size_per_file => Some(each),
            Some(total) => {
                let share = total / count;
                if share == 0 || !share.is_multiple_of(bs) {
                    return Err(WorkloadError::FioBadValue {
                        job: self.name.clone(),
                        option: "size".into(),
                        value: total.to_string(),
                        expected: alloc::format!(
                            "a size that splits into whole blocks over the {count} files (fio gives each \
                             size/{count} bytes): a multiple of {} ({count} x bs {bs})",
                            count * bs
                        ),
                    });
                }
                Some(share)
            }
            None => None,
        };
        let mut regions = Vec::with_capacity(names.len());
        for name in names {
            let device = self.named_device(devices, name)?;
            let capacity = device.validated_capacity_bytes()?;
            let offset = match self.offset_percent {
                Some(p) => capacity / 100 * u64::from(p) / bs * bs,
                None => self.spec.offset,
            };
            let size = match (share, self.size_percent) {
                (Some(share), _) => share,
                (None, Some(p)) => (capacity.saturating_sub(offset) / 100 * u64::from(p) / bs * bs).max(bs),
                (None, None) => capacity.saturating_sub(offset) / bs * bs,
            };
            if size == 0 {
                return Err(WorkloadError::JobLargerThanDevice {
                    job: self.name.clone(),
                    device: device.name.clone(),
                    end_bytes: offset.saturating_add(bs),
                    capacity_bytes: capacity,
                });
            }
            regions.push(FileRegion {
                device: device.name.clone(),
                offset,
                size,
            });
        }
        Ok(regions)
    }

    /// Whether the job (its own section or the globals above it) set one of `keys` to something
    /// other than false.
    fn options_have(&self, keys: &[&str]) -> bool {
        self.set_keys.iter().any(|k| keys.contains(&k.as_str()))
    }

    /// The engine job for this fio job on these devices and online CPUs: the device from
    /// `filename`, percentages of its capacity, the clones' CPUs (`cpus_allowed`, else the first
    /// `numjobs` online CPUs), and `loops` passes over the region.
    pub fn to_spec(&self, devices: &[DeviceInfo], online_cpus: &[u32]) -> Result<JobSpec, WorkloadError> {
        self.to_spec_beside(devices, online_cpus, &CpuSet::new())
    }

    /// [`FioJob::to_spec`] for a job that runs beside others: the CPUs in `busy` (taken by the
    /// jobs of the same wave) are not used.
    pub fn to_spec_beside(
        &self,
        devices: &[DeviceInfo],
        online_cpus: &[u32],
        busy: &CpuSet,
    ) -> Result<JobSpec, WorkloadError> {
        let mut spec = self.spec.clone();
        let bs = u64::from(spec.bs);
        // The bytes of one clone's region, and of its smallest file (the one file's region for
        // a job on one device).
        let (region, smallest_file) = if let Target::Devices(names) = &self.target {
            spec.files = self.file_regions(names, devices, bs)?;
            spec.device = Some(spec.files[0].device.clone());
            (
                spec.files.iter().map(|f| f.size).sum::<u64>(),
                spec.files.iter().map(|f| f.size).min().unwrap_or(0),
            )
        } else {
            self.place_on_device(&mut spec, devices)?
        };
        let online = CpuSet::from_cpus(online_cpus);
        let wanted = self.numjobs;
        let candidates: Vec<u32> = match self.cpus_allowed {
            Some(set) => {
                if let Some(cpu) = set.iter().find(|c| !online.contains(*c)) {
                    return Err(WorkloadError::CpuNotOnline {
                        job: self.name.clone(),
                        cpu,
                        online: online.to_string(),
                    });
                }
                set.iter().filter(|c| !busy.contains(*c)).collect()
            }
            None => online.iter().filter(|c| !busy.contains(*c)).collect(),
        };
        if candidates.len() < wanted as usize {
            return Err(unsupported(
                &self.name,
                "numjobs",
                alloc::format!(
                    "numjobs={wanted} needs one CPU per clone and only {} are available ({}{}); baremq does not \
                     share a CPU between clones or jobs",
                    candidates.len(),
                    if self.cpus_allowed.is_some() {
                        "cpus_allowed"
                    } else {
                        "online"
                    },
                    if busy.is_empty() {
                        String::new()
                    } else {
                        alloc::format!(", less CPUs {busy} of the jobs running at the same time")
                    }
                ),
            ));
        }
        spec.cpus = crate::job::CpuSelection::List(CpuSet::from_cpus(&candidates[..wanted as usize]));
        let zoned_bytes: u64 = spec
            .zones
            .iter()
            .map(|z| match z.length {
                crate::job::ZoneLength::Bytes(b) => b,
                crate::job::ZoneLength::Percent(_) => 0,
            })
            .sum();
        if zoned_bytes > smallest_file {
            return Err(WorkloadError::FioBadValue {
                job: self.name.clone(),
                option: "random_distribution".into(),
                value: alloc::format!("zoned_abs zones of {zoned_bytes} bytes"),
                expected: alloc::format!("zones that fit in the job's region of {smallest_file} bytes"),
            });
        }
        if self.loops > 1 || self.ios_per_pass.is_some() {
            let per_pass = self.ios_per_pass.unwrap_or(region / bs);
            spec.ios_per_cpu = Some(per_pass.saturating_mul(self.loops));
        }
        Ok(spec)
    }
}

#[cfg(test)]
mod tests;
