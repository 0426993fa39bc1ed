//! Reading the kernel's `BAREMQ-JSON:` lines out of a boot's console, matching them to the planned
//! jobs, judging them, and storing the results (`results.json`, `results.csv`).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::matrix::{BootPlan, Point};

/// Prefix of the kernel's one JSON line per job (the workload crate's `JSON_PREFIX`).
pub const JSON_PREFIX: &str = "BAREMQ-JSON: ";

/// The parts of the kernel's job report the bench reads. Everything else is kept in the raw JSON.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct KernelReport {
    /// The job as the kernel ran it.
    pub job: JobEcho,
    /// The device it ran on.
    pub device: DeviceEcho,
    /// Measured runtime (longest CPU), ns.
    pub runtime_ns: u64,
    /// Completed I/Os, both directions.
    pub ios: u64,
    /// I/Os per second over `runtime_ns`.
    pub iops: u64,
    /// Bytes moved by successful I/Os.
    pub bytes: u64,
    /// Bytes per second.
    pub bw_bytes: u64,
    /// Failed I/Os.
    pub errors: u64,
    /// Latency of both directions.
    pub lat_ns: Latency,
    /// Verify outcome.
    pub verify: VerifyEcho,
    /// Per-CPU shares.
    pub per_cpu: Vec<CpuEcho>,
    /// Per-CPU counters the kernel adds (interrupts, IPIs, ...).
    #[serde(default)]
    pub counters: Vec<Counter>,
    /// Whole-job counters the kernel adds (block-layer counts by completion policy, locks taken on
    /// the hot path, ...).
    #[serde(default)]
    pub totals: BTreeMap<String, u64>,
    /// Planner warnings (e.g. a capped iodepth).
    #[serde(default)]
    pub warnings: Vec<String>,
    /// Whether a CPU stopped early.
    pub stopped_early: bool,
    /// `pass` or `fail`.
    pub result: String,
}

/// `job{}` of the report.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct JobEcho {
    /// Job name.
    pub name: String,
    /// Access pattern.
    pub rw: String,
    /// Block size in bytes.
    pub bs: u64,
    /// Queue depth the job ran with (after capping).
    pub iodepth: u64,
    /// Queue depth asked for.
    pub iodepth_requested: u64,
    /// Submitting CPUs.
    pub cpus: Vec<u32>,
    /// Device name.
    pub device: String,
    /// Verify mode.
    pub verify: String,
    /// Completion policy (`default` when not given).
    pub completion: String,
    /// Quiesce policy (`default` when not given).
    pub quiesce: String,
}

/// `device{}` of the report.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct DeviceEcho {
    /// Device name.
    pub name: String,
    /// Most requests per CPU the device allows.
    pub max_iodepth: u64,
}

/// Latency statistics in ns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub struct Latency {
    /// Samples.
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

/// `verify{}` of the report.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct VerifyEcho {
    /// `off`, `pass`, `fail` or `nothing_checked`.
    pub result: String,
    /// Mismatched blocks.
    pub mismatches: u64,
}

/// One entry of `per_cpu[]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub struct CpuEcho {
    /// CPU number.
    pub cpu: u32,
    /// Its I/Os.
    pub ios: u64,
    /// Its IOPS.
    pub iops: u64,
}

/// One entry of `counters[]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Counter {
    /// Counter name.
    pub name: String,
    /// One value per submitting CPU.
    pub per_cpu: Vec<u64>,
}

impl Counter {
    /// Sum over the CPUs.
    pub fn total(&self) -> u64 {
        self.per_cpu.iter().sum()
    }
}

impl KernelReport {
    /// Why the job does not count as a clean measurement, if it does not.
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if self.errors > 0 {
            problems.push(format!("{} I/O errors", self.errors));
        }
        if matches!(self.verify.result.as_str(), "fail" | "nothing_checked") {
            problems.push(format!(
                "verify {} ({} mismatches)",
                self.verify.result, self.verify.mismatches
            ));
        }
        if self.result != "pass" {
            problems.push(format!("kernel verdict '{}'", self.result));
        }
        if self.stopped_early {
            problems.push("stopped early".into());
        }
        if self.ios == 0 {
            problems.push("no I/O completed".into());
        }
        problems
    }

    /// Kernel counter `name` over the whole job: a `totals` entry, or the sum of a per-CPU
    /// counter; `None` when the kernel did not report it.
    pub fn counter_total(&self, name: &str) -> Option<u64> {
        self.totals
            .get(name)
            .copied()
            .or_else(|| self.counters.iter().find(|c| c.name == name).map(Counter::total))
    }

    /// Differences between what was asked and what the kernel says it ran.
    fn mismatches_with(&self, point: &Point) -> Vec<String> {
        let job = &self.job;
        let mut out = Vec::new();
        let mut check = |what: &str, asked: String, ran: String| {
            if asked != ran {
                out.push(format!("{what}: asked {asked}, kernel ran {ran}"));
            }
        };
        check("rw", point.rw.as_str().into(), job.rw.clone());
        check("bs", point.bs.to_string(), job.bs.to_string());
        check("iodepth", point.iodepth.to_string(), job.iodepth_requested.to_string());
        check(
            "cpus",
            format!("{:?}", (0..point.cpus).collect::<Vec<_>>()),
            format!("{:?}", job.cpus),
        );
        check("completion", point.completion.job_word().into(), job.completion.clone());
        check("quiesce", point.quiesce.as_str().into(), job.quiesce.clone());
        check("device", point.device.device_name().into(), job.device.clone());
        out
    }
}

/// Where a JSON line came from and what went wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineError {
    /// 1-based line number in the console log.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

/// Every `BAREMQ-JSON:` line of `console`, parsed: the raw value and the typed report, or why not.
pub fn parse_console(console: &str) -> Vec<Result<(Value, KernelReport), LineError>> {
    console
        .lines()
        .enumerate()
        .filter_map(|(i, line)| {
            let at = line.find(JSON_PREFIX)?;
            let text = line[at + JSON_PREFIX.len()..].trim();
            let error = |message: String| LineError { line: i + 1, message };
            let parsed = serde_json::from_str::<Value>(text)
                .map_err(|e| error(format!("not JSON ({e})")))
                .and_then(|raw| {
                    KernelReport::deserialize(&raw)
                        .map(|report| (raw, report))
                        .map_err(|e| error(format!("not a job report ({e})")))
                });
            Some(parsed)
        })
        .collect()
}

/// Run-wide facts stored with every record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunInfo {
    /// Matrix name.
    pub matrix: String,
    /// `tcg` or `kvm`.
    pub accel: String,
    /// Runtime of each job, ms.
    pub runtime_ms: u64,
}

/// One job's measurement with the matrix point it belongs to.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// Run-wide facts.
    pub run: RunInfo,
    /// Boot index within one pass over the matrix.
    pub boot: usize,
    /// Which pass over the matrix (`--repeat`), from 0.
    pub repeat: u32,
    /// Console log of the boot, relative to the workspace root.
    pub log: String,
    /// `-smp` of the boot.
    pub machine_cpus: u32,
    /// `-m` of the boot.
    pub memory: String,
    /// The point asked for.
    pub point: Point,
    /// Why the measurement is not clean (empty when it is).
    pub problems: Vec<String>,
    /// The typed report.
    pub report: KernelReport,
    /// The kernel's JSON object, unchanged.
    pub raw: Value,
}

impl Record {
    /// Whether the measurement is clean.
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }
}

/// What came out of one boot.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BootResult {
    /// One record per job line that matched a planned job.
    pub records: Vec<Record>,
    /// Problems of the boot as a whole (no SUCCESS, a missing or broken JSON line, ...).
    pub boot_problems: Vec<String>,
}

impl BootResult {
    /// Whether the boot and every job in it were clean.
    pub fn ok(&self) -> bool {
        self.boot_problems.is_empty() && self.records.iter().all(Record::ok)
    }
}

/// Matches the JSON lines of `console` to the jobs of `boot`. `verdict` is the boot's own outcome
/// (exit status and SUCCESS line), judged by the caller.
pub fn collect_boot(
    run: &RunInfo,
    boot: &BootPlan,
    repeat: u32,
    log: &str,
    console: &str,
    verdict: Result<(), String>,
) -> BootResult {
    let mut result = BootResult::default();
    if let Err(why) = verdict {
        result.boot_problems.push(format!("boot failed: {why}"));
    }
    let mut seen = BTreeSet::new();
    for parsed in parse_console(console) {
        let (raw, report) = match parsed {
            Ok(ok) => ok,
            Err(e) => {
                result
                    .boot_problems
                    .push(format!("{log}:{}: bad BAREMQ-JSON line: {}", e.line, e.message));
                continue;
            }
        };
        let Some(job) = boot.jobs.iter().find(|j| j.name == report.job.name) else {
            result.boot_problems.push(format!(
                "the kernel reported job '{}', which was not asked for",
                report.job.name
            ));
            continue;
        };
        if !seen.insert(job.name.clone()) {
            result
                .boot_problems
                .push(format!("job '{}' was reported twice", job.name));
            continue;
        }
        let mut problems = report.mismatches_with(&job.point);
        problems.extend(report.problems());
        result.records.push(Record {
            run: run.clone(),
            boot: boot.index,
            repeat,
            log: log.to_string(),
            machine_cpus: boot.smp,
            memory: boot.mem.clone(),
            point: job.point,
            problems,
            report,
            raw,
        });
    }
    for job in &boot.jobs {
        if !seen.contains(&job.name) {
            result
                .boot_problems
                .push(format!("no BAREMQ-JSON line for job '{}' ({})", job.name, job.point));
        }
    }
    result
}

/// The form of a record in `results.json`.
#[derive(Debug, Serialize, Deserialize)]
struct Stored {
    matrix: String,
    accel: String,
    runtime_ms: u64,
    boot: usize,
    #[serde(default)]
    repeat: u32,
    log: String,
    machine_cpus: u32,
    memory: String,
    point: Point,
    ok: bool,
    problems: Vec<String>,
    report: Value,
}

/// `results.json`: an array with one object per job.
pub fn to_json(records: &[Record]) -> Result<String, String> {
    let stored: Vec<Stored> = records
        .iter()
        .map(|r| Stored {
            matrix: r.run.matrix.clone(),
            accel: r.run.accel.clone(),
            runtime_ms: r.run.runtime_ms,
            boot: r.boot,
            repeat: r.repeat,
            log: r.log.clone(),
            machine_cpus: r.machine_cpus,
            memory: r.memory.clone(),
            point: r.point,
            ok: r.ok(),
            problems: r.problems.clone(),
            report: r.raw.clone(),
        })
        .collect();
    serde_json::to_string_pretty(&stored).map_err(|e| format!("encoding results.json: {e}"))
}

/// Reads `results.json` back (for `--replot`).
pub fn from_json(text: &str) -> Result<Vec<Record>, String> {
    let stored: Vec<Stored> =
        serde_json::from_str(text).map_err(|e| format!("results.json is not a bench result array: {e}"))?;
    stored
        .into_iter()
        .enumerate()
        .map(|(i, s)| {
            let report = KernelReport::deserialize(&s.report)
                .map_err(|e| format!("results.json entry {i}: the kernel report does not parse: {e}"))?;
            Ok(Record {
                run: RunInfo {
                    matrix: s.matrix,
                    accel: s.accel,
                    runtime_ms: s.runtime_ms,
                },
                boot: s.boot,
                repeat: s.repeat,
                log: s.log,
                machine_cpus: s.machine_cpus,
                memory: s.memory,
                point: s.point,
                problems: s.problems,
                report,
                raw: s.report,
            })
        })
        .collect()
}

/// Names of every kernel counter (per-CPU or total) any record carries, sorted.
pub fn counter_names(records: &[Record]) -> Vec<String> {
    let names: BTreeSet<&str> = records
        .iter()
        .flat_map(|r| {
            let per_cpu = r.report.counters.iter().map(|c| c.name.as_str());
            per_cpu.chain(r.report.totals.keys().map(String::as_str))
        })
        .collect();
    names.into_iter().map(str::to_string).collect()
}

/// Nanoseconds as microseconds with three decimals.
pub fn micros(ns: u64) -> String {
    format!("{}.{:03}", ns / 1000, ns % 1000)
}

/// Bytes per second as MB/s (10^6) with two decimals.
pub fn megabytes(bytes_per_s: u64) -> String {
    let hundredths = (u128::from(bytes_per_s) + 5_000) / 10_000;
    format!("{}.{:02}", hundredths / 100, hundredths % 100)
}

/// Quotes a CSV field when it needs it (RFC 4180).
fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_string()
    }
}

/// Fixed CSV columns, before one column per kernel counter name (its whole-job total).
pub const CSV_COLUMNS: &[&str] = &[
    "matrix",
    "accel",
    "repeat",
    "boot",
    "device_kind",
    "device",
    "machine_cpus",
    "rw",
    "bs",
    "iodepth",
    "iodepth_run",
    "cpus",
    "completion",
    "quiesce",
    "runtime_s",
    "ios",
    "iops",
    "bw_mb_s",
    "lat_mean_us",
    "lat_p50_us",
    "lat_p90_us",
    "lat_p99_us",
    "lat_p99_9_us",
    "lat_max_us",
    "errors",
    "verify",
    "ok",
    "problems",
];

/// `results.csv`: a header, then one row per record.
pub fn to_csv(records: &[Record]) -> String {
    let counters = counter_names(records);
    let mut out = String::new();
    let mut header: Vec<String> = CSV_COLUMNS.iter().map(|c| c.to_string()).collect();
    header.extend(counters.iter().map(|c| csv_field(c)));
    out.push_str(&header.join(","));
    out.push('\n');
    for r in records {
        let rep = &r.report;
        let lat = &rep.lat_ns;
        let mut row: Vec<String> = vec![
            r.run.matrix.clone(),
            r.run.accel.clone(),
            r.repeat.to_string(),
            r.boot.to_string(),
            r.point.device.key().into(),
            rep.device.name.clone(),
            r.machine_cpus.to_string(),
            r.point.rw.as_str().into(),
            r.point.bs.to_string(),
            r.point.iodepth.to_string(),
            rep.job.iodepth.to_string(),
            r.point.cpus.to_string(),
            r.point.completion.as_str().into(),
            r.point.quiesce.as_str().into(),
            format!(
                "{}.{:03}",
                rep.runtime_ns / 1_000_000_000,
                rep.runtime_ns / 1_000_000 % 1000
            ),
            rep.ios.to_string(),
            rep.iops.to_string(),
            megabytes(rep.bw_bytes),
            micros(lat.mean),
            micros(lat.p50),
            micros(lat.p90),
            micros(lat.p99),
            micros(lat.p99_9),
            micros(lat.max),
            rep.errors.to_string(),
            rep.verify.result.clone(),
            r.ok().to_string(),
            r.problems.join("; "),
        ];
        row.extend(
            counters
                .iter()
                .map(|name| rep.counter_total(name).map_or(String::new(), |v| v.to_string())),
        );
        let line: Vec<String> = row.iter().map(|f| csv_field(f)).collect();
        let _ = writeln!(out, "{}", line.join(","));
    }
    out
}
