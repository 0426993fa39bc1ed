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
//!
//! # Files
//!
//! This file has the entry points and the jobs' shape; [`syntax`] reads the text. Each family
//! of options maps its own keys onto a job: `io` (rw, block sizes, sizes, depth, engine,
//! flushes), `files` (filename, file service, clones and their CPUs), `time` (runtime, ramp,
//! start delay, rates, think time), `random` (distributions, seeds), `verify`, `report`
//! (names, percentiles, logs), `schedule` (stonewall, wait_for, waves, exitall) and `zones`
//! (zonemode=strided), the last taken through `io`; `refused` has the
//! options accepted as no-ops and those refused. `finish` settles a job's options once all
//! are applied, `run` has the options of the whole run, and `place` resolves a job against the
//! devices and CPUs.

mod files;
mod finish;
mod io;
mod latency;
mod numa;
pub mod pattern;
mod place;
mod random;
mod refused;
mod report;
mod run;
mod schedule;
mod steady;
pub mod syntax;
mod time;
mod uring;
pub mod values;
mod verify;
mod zones;

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use crate::error::WorkloadError;
use crate::job::{JobSpec, VerifyMode};
use crate::values::CpuSet;
use io::DEFAULT_FIO_BS;
pub use io::{ASYNC_ENGINES, SYNC_ENGINES};
pub use numa::place_on_nodes;
pub use refused::NO_OP_OPTIONS;
pub use report::{FioReportOptions, LogOptions, MIN_LOG_MSEC};
use run::apply_run_option;
pub use run::{FioRunOptions, OutputFormat, split_run_words};
use schedule::assign_waves;
pub use schedule::wave_specs;
use syntax::{Entry, Section};
pub use values::FioEnv;
use values::{BOOL_FORM, SIZE_FORM, SizeOrPercent, TIME_FORM};

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

/// fio's `exit_what`: which jobs a job that ends stops when `exitall` is set for the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitWhat {
    /// `group` (fio's default): the jobs of its reporting group, started or not.
    Group,
    /// `stonewall`: the jobs running at that moment (its own clones here); later jobs still run.
    Stonewall,
    /// `all`: every job, those not started yet included.
    All,
}

impl ExitWhat {
    fn name(self) -> &'static str {
        match self {
            Self::Group => "group",
            Self::Stonewall => "stonewall",
            Self::All => "all",
        }
    }
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
    /// `numa_cpu_nodes`, until [`place_on_nodes`] turns it into `cpus_allowed` (a job still
    /// holding it is refused when placed).
    pub numa_cpu_nodes: Option<CpuSet>,
    /// The device.
    pub target: Target,
    /// `exit_what`: what this job stops when it ends, if `exitall` is set for the run.
    pub exit_what: ExitWhat,
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
    /// The jobs in fio's order (those `exitall` keeps from starting left out).
    pub jobs: Vec<FioJob>,
    /// What the run as a whole became, one line each (a job `exitall` keeps from starting).
    pub notes: Vec<String>,
}

/// Most `numjobs` clones of one job.
pub const MAX_NUMJOBS: u64 = 256;

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
    // fio's exitall is one switch for the whole run: set by any job, every job that ends stops
    // others (its exit_what says which). exitall_on_error is the job's own.
    let exitall = jobs.iter().any(|j| j.options_have(&["exitall"]));
    let mut run = FioRun {
        options,
        jobs,
        notes: Vec::new(),
    };
    for wave in run.waves() {
        if wave.len() > 1
            && let Some(job) = wave.iter().find(|j| j.options_have(&["exitall_on_error"]))
        {
            return Err(unsupported(
                &job.name,
                "exitall_on_error",
                "stopping the other jobs of a wave when one fails is not implemented; put a stonewall between them",
            ));
        }
    }
    if exitall {
        end_with_exitall(&mut run);
    }
    Ok(run)
}

/// With `exitall`, the jobs of the same wave job `ender` stops when it ends, as indices in
/// `wave`: `exit_what=group` those of its reporting group, `stonewall` and `all` every job
/// running beside it.
fn stopped_beside(wave: &[FioJob], ender: usize) -> Vec<u32> {
    (0..wave.len())
        .filter(|&other| other != ender)
        .filter(|&other| match wave[ender].exit_what {
            ExitWhat::Group => wave[other].group == wave[ender].group,
            ExitWhat::Stonewall | ExitWhat::All => true,
        })
        // A wave's jobs are far fewer than u32::MAX.
        .map(|other| other as u32)
        .collect()
}

/// fio's `exitall`: a job's first clone to end stops its other clones; the job's end stops the
/// jobs running beside it that its `exit_what` names (`group`: those of its reporting group;
/// `stonewall`, `all`: all of them), and the jobs of later waves it names before they start
/// (`group`: its reporting group's; `all`: all of them; `stonewall`: none), so those never run.
fn end_with_exitall(run: &mut FioRun) {
    let mut index = 0;
    while index < run.jobs.len() {
        run.jobs[index].spec.exitall = true;
        let wave_start = (0..=index)
            .rev()
            .take_while(|&i| run.jobs[i].wave == run.jobs[index].wave)
            .last()
            .unwrap_or(index);
        let wave_end = (index..run.jobs.len())
            .take_while(|&i| run.jobs[i].wave == run.jobs[index].wave)
            .last()
            .unwrap_or(index)
            + 1;
        let beside = stopped_beside(&run.jobs[wave_start..wave_end], index - wave_start);
        run.jobs[index].spec.exitall_stops = beside;
        let ender = run.jobs[index].clone();
        let mut later = wave_end.max(index + 1);
        while later < run.jobs.len() {
            let stopped = match ender.exit_what {
                ExitWhat::All => true,
                ExitWhat::Group => run.jobs[later].group == ender.group,
                ExitWhat::Stonewall => false,
            };
            if stopped {
                let job = run.jobs.remove(later);
                run.notes.push(format!(
                    "job {:?} does not run: with exitall, job {:?} stops {} when it ends (exit_what={}), and {:?} \
                     had not started (as fio)",
                    job.name,
                    ender.name,
                    match ender.exit_what {
                        ExitWhat::All => "every job",
                        _ => "the jobs of its group",
                    },
                    ender.exit_what.name(),
                    job.name
                ));
            } else {
                later += 1;
            }
        }
        index += 1;
    }
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
    numa_cpu_nodes: Option<CpuSet>,
    target: Target,
    /// `filename` was given (fio then ignores `filename_format`).
    filename_given: bool,
    /// `filename_format` as written: the files' names when `filename` is not given.
    filename_format: Option<String>,
    /// `nrfiles`: files per clone named by `filename_format` (fio's default 1).
    nrfiles: Option<u64>,
    /// `directory` as written.
    directory: Option<String>,
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
    /// fio's `continue_on_error`: bits of [`crate::job::ErrorClass`].
    continue_on_error: u8,
    /// fio's `verify_fatal`: a mismatch stops the job whatever `continue_on_error` says.
    verify_fatal: bool,
    stonewall: bool,
    new_group: bool,
    exitall: bool,
    exit_what: ExitWhat,
    verify_interval: Option<u64>,
    /// `fill_device` / `fill_fs`: the region runs to the device's end, whatever `size` says.
    fill_device: bool,
    /// `rate_cycle`, applied to the minimum rates in `finish` (it may come before them).
    rate_cycle_ns: Option<u64>,
    /// `dedupe_percentage`, `dedupe_mode=working_set` with `dedupe_working_set_percentage`
    /// (fio's default 5), `dedupe_global`, `buffer_compress_percentage`, `buffer_compress_chunk`
    /// (default 512): settled into the spec's write content in `finish`.
    dedupe_percent: u8,
    dedupe_working_set: bool,
    dedupe_working_set_percent: u8,
    dedupe_global: bool,
    compress_percent: u8,
    compress_chunk: u32,
    /// `buffer_pattern`, parsed (fio's grammar, as `verify_pattern`).
    buffer_pattern: Option<Vec<u8>>,
    /// `latency_target` and its companions, as written (settled in `finish`).
    latency_target: Option<crate::job::LatencyTarget>,
    blockalign: Option<u64>,
    /// fio's `rw=NAME:N`, settled once the block size is known.
    offset_modifier: Option<io::OffsetModifier>,
    /// `zonemode=strided` and its `zonesize`, `zonerange`, `zoneskip` in bytes, as written.
    zones: zones::ZoneOptions,
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
            numa_cpu_nodes: None,
            target: Target::Default,
            filename_given: false,
            filename_format: None,
            nrfiles: None,
            directory: None,
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
            continue_on_error: 0,
            verify_fatal: false,
            stonewall: false,
            new_group: false,
            exitall: false,
            exit_what: ExitWhat::Group,
            verify_interval: None,
            fill_device: false,
            rate_cycle_ns: None,
            dedupe_percent: 0,
            dedupe_working_set: false,
            dedupe_working_set_percent: 5,
            dedupe_global: false,
            compress_percent: 0,
            compress_chunk: 512,
            buffer_pattern: None,
            latency_target: None,
            blockalign: None,
            offset_modifier: None,
            zones: zones::ZoneOptions::default(),
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

    /// Maps one entry onto the job: each family of options takes its own keys (every key is in
    /// one family at most), and a key none takes is a no-op or refused.
    fn apply(&mut self, entry: &Entry) -> Result<(), WorkloadError> {
        let key = entry.key.as_str();
        let job = self.name.clone();
        let expanded = self.expand(entry)?;
        let value = expanded.as_deref().or(entry.value.as_deref());
        let setting = Setting { job: &job, key, value };
        let taken = self.apply_report(&setting)?
            || self.apply_files(&setting)?
            || self.apply_io(&setting)?
            || self.apply_time(&setting)?
            || self.apply_schedule(&setting)?
            || self.apply_random(&setting)?
            || self.apply_verify(&setting)?
            || self.apply_steady(&setting)?
            || self.apply_uring(&setting)?
            || self.apply_latency_target(&setting)?
            || self.apply_numa(&setting)?;
        if !taken {
            self.apply_unhandled(&setting)?;
        }
        Ok(())
    }

    /// fio's arithmetic and `$` keywords in a value, evaluated to a decimal integer (`None`: the
    /// value has none). Text values (names, paths) are taken as written.
    fn expand(&self, entry: &Entry) -> Result<Option<String>, WorkloadError> {
        const TEXT_KEYS: [&str; 10] = [
            "name",
            "description",
            "filename",
            "filename_format",
            "directory",
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
}

/// One entry being applied to a job: its key and its value (after `$` expansion), with the
/// readings of the value that every family of options shares.
struct Setting<'a> {
    job: &'a str,
    key: &'a str,
    value: Option<&'a str>,
}

impl<'a> Setting<'a> {
    /// The value, `""` for a bare key.
    fn text(&self) -> &'a str {
        self.value.unwrap_or("")
    }

    /// The error for a value that is not what the option takes.
    fn bad(&self, expected: &str) -> WorkloadError {
        WorkloadError::FioBadValue {
            job: self.job.to_string(),
            option: self.key.to_string(),
            value: self.text().to_string(),
            expected: expected.to_string(),
        }
    }

    /// The value, which must be there and not empty.
    fn need(&self) -> Result<&'a str, WorkloadError> {
        self.value
            .filter(|v| !v.is_empty())
            .ok_or_else(|| self.bad("a value (key=value)"))
    }

    /// A boolean option. A bare key sets it, as fio's FIO_OPT_STR_SET does.
    fn flag(&self) -> Result<bool, WorkloadError> {
        match self.value {
            None => Ok(true),
            Some(v) => values::boolean(v).ok_or_else(|| self.bad(BOOL_FORM)),
        }
    }

    /// A size in bytes.
    fn size(&self) -> Result<u64, WorkloadError> {
        values::size(self.need()?).ok_or_else(|| self.bad(SIZE_FORM))
    }

    /// A time in ns; a bare number counts `bare` ns.
    fn time(&self, bare: u64) -> Result<u64, WorkloadError> {
        values::time_ns(self.need()?, bare).ok_or_else(|| self.bad(TIME_FORM))
    }
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

impl FioJob {
    /// Whether the job (its own section or the globals above it) set one of `keys` to something
    /// other than false.
    fn options_have(&self, keys: &[&str]) -> bool {
        self.set_keys.iter().any(|k| keys.contains(&k.as_str()))
    }
}

#[cfg(test)]
mod tests;
