//! `cargo xtask lab`: the experiments of the Linux threads baremq starts from (docs/background.md),
//! on one machine in one command.
//!
//! Per device kind, one set of boots (jobs packed into boots exactly as `cargo xtask bench` does,
//! through its matrix, runner, results and plot code) runs:
//! - (a) the three quiesce designs (`lockfree`, `locked`, `sleeping`) with every CPU submitting
//!   and completing at once, sweeping CPUs and queue depth, for sequential 128k reads (the
//!   threads' workload) and 4k random reads;
//! - (b) the four completion policies (irq, local, remote, poll) under each quiesce design at
//!   one reference point.
//!
//! It writes `target/lab/results.{json,csv}` and the bench plots there, then prints the lab
//! table (MB/s, IOPS, p99, lock acquisitions, contended acquisitions, parks, IPIs and interrupts
//! per I/O), the ratios sleeping/lockfree and locked/lockfree, writes `lab.csv` and
//! `lab_quiesce_*.svg`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use crate::bench::matrix::{
    Base, BootPlan, Completion, DeviceKind, Matrix, PlannedJob, Point, Quiesce, Rw, Sweep, size_word,
};
use crate::bench::plots::{self, Chart, Series};
use crate::bench::results::{self, Record, micros};
use crate::qemu::Accel;

const USAGE: &str = "\
usage: cargo xtask lab [options]
  --quick              short run for a small machine: -smp 2, CPUs 1-2, 500 ms jobs (default: -smp 4,
                       CPUs 1/2/4, 2 s jobs)
  --device KIND        null, md (megasas-gen2), nvme, fusion (the emulated MegaRAID Fusion Invader of
                       `cargo xtask qemu-fusion`, mf0, one reply queue per CPU), or all (default all)
  --runtime DUR        runtime of every job (e.g. 300ms, 2s)
  --trace [N]          timestamp every stage of 1 in N requests (default 64): per-stage p50/p99 in
                       each job's report, and target/lab/trace.json for Perfetto / chrome://tracing
  --list               print the boots and their kernel command lines, run nothing
  --replot             rebuild the table, CSVs and plots from target/lab/results.json, run nothing
  --kvm | --debug | --verbose";

const KB: u32 = 1024;
/// `--trace` without a number: 1 in this many requests.
const DEFAULT_TRACE_EVERY: u32 = 64;
const QUIESCE_ALL: &[Quiesce] = &[Quiesce::LockFree, Quiesce::Locked, Quiesce::Sleeping];

/// Which devices `--device` selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DeviceChoice {
    Null,
    Md,
    Nvme,
    Fusion,
    All,
}

impl DeviceChoice {
    fn parse(text: &str) -> Result<Self, String> {
        match text {
            "null" => Ok(Self::Null),
            "md" => Ok(Self::Md),
            "nvme" => Ok(Self::Nvme),
            "fusion" => Ok(Self::Fusion),
            "all" => Ok(Self::All),
            other => Err(format!("lab: --device '{other}': use null, md, nvme, fusion or all")),
        }
    }

    /// The device kinds selected.
    fn kinds(self) -> &'static [DeviceKind] {
        match self {
            Self::Null => &[DeviceKind::Null],
            Self::Md => &[DeviceKind::MegasasGen2],
            Self::Nvme => &[DeviceKind::Nvme],
            Self::Fusion => &[DeviceKind::Fusion],
            Self::All => &[
                DeviceKind::Null,
                DeviceKind::MegasasGen2,
                DeviceKind::Nvme,
                DeviceKind::Fusion,
            ],
        }
    }
}

/// Parsed `cargo xtask lab` options.
#[derive(Debug, Clone, PartialEq, Eq)]
struct LabOptions {
    quick: bool,
    device: DeviceChoice,
    runtime_ms: Option<u64>,
    list: bool,
    replot: bool,
    /// `--trace N`: trace 1 in N requests (0: off).
    trace_every: u32,
    accel: Accel,
    debug: bool,
    verbose: bool,
}

impl LabOptions {
    fn parse(args: &[String]) -> Result<Self, String> {
        let mut o = LabOptions {
            quick: false,
            device: DeviceChoice::All,
            runtime_ms: None,
            list: false,
            replot: false,
            trace_every: 0,
            accel: Accel::Tcg,
            debug: false,
            verbose: false,
        };
        let mut options = crate::args::Options::new(args);
        while let Some(option) = options.next()? {
            let mut value = || options.value().map_err(|e| format!("lab: {e}\n{USAGE}"));
            match option {
                "--quick" => o.quick = true,
                "--device" => o.device = DeviceChoice::parse(value()?)?,
                "--runtime" => o.runtime_ms = Some(crate::bench::matrix::parse_runtime_ms(value()?)?),
                "--list" => o.list = true,
                "--replot" => o.replot = true,
                "--trace" => {
                    o.trace_every = DEFAULT_TRACE_EVERY;
                    if let Some(n) = options.optional_value(|v| !v.starts_with("--")) {
                        o.trace_every =
                            n.parse().ok().filter(|n| (1..=1 << 20).contains(n)).ok_or_else(|| {
                                format!("lab: --trace '{n}': use N from 1 to 1048576 (1 in N requests)")
                            })?;
                    }
                }
                "--kvm" => o.accel = Accel::Kvm,
                "--tcg" => o.accel = Accel::Tcg,
                "--debug" => o.debug = true,
                "--verbose" => o.verbose = true,
                "-h" | "--help" => return Err(USAGE.to_string()),
                other => return Err(format!("lab: unknown option '{other}'\n{USAGE}")),
            }
        }
        Ok(o)
    }
}

/// The lab's matrix for `devices`: quick (2 CPUs) or full (4 CPUs).
fn lab_matrix(quick: bool, devices: &'static [DeviceKind]) -> Matrix {
    let cpus: &'static [u32] = if quick { &[1, 2] } else { &[1, 2, 4] };
    let top = *cpus.last().expect("at least one CPU count");
    let reference: &'static [u32] = if quick { &[2] } else { &[4] };
    Matrix {
        name: if quick { "lab-quick" } else { "lab" },
        about: "the quiesce designs of the Linux threads and the completion policies, per device",
        smp: top,
        mem: if quick { "512M" } else { "1G" },
        runtime_ms: if quick { 500 } else { 2000 },
        sweeps: Box::leak(Box::new([
            // (a) quiesce designs, every CPU submitting and completing at once.
            Sweep {
                devices,
                rw: &[Rw::Read],
                bs: &[128 * KB],
                iodepth: &[1, 8, 32],
                cpus,
                completion: &[Completion::Irq],
                quiesce: QUIESCE_ALL,
            },
            Sweep {
                devices,
                rw: &[Rw::RandRead],
                bs: &[4 * KB],
                iodepth: &[1, 8, 32],
                cpus,
                completion: &[Completion::Irq],
                quiesce: QUIESCE_ALL,
            },
            // (b) completion policies at the reference point.
            Sweep {
                devices,
                rw: &[Rw::RandRead],
                bs: &[4 * KB],
                iodepth: &[8],
                cpus: reference,
                completion: &Completion::ALL,
                quiesce: QUIESCE_ALL,
            },
        ])),
        base: Base {
            rw: Rw::RandRead,
            bs: 4 * KB,
            iodepth: 8,
            cpus: top,
            completion: Completion::Irq,
            quiesce: Quiesce::LockFree,
        },
    }
}

/// Kernel option of the adaptive-completion boot (MegaRAID only, needs MSI-X).
const ADAPTIVE_OPTION: &str = "megasas.irq_poll=on";

/// The matrix's boots, then (when MegaRAID is selected) one boot with `megasas.irq_poll=on`
/// that repeats part (b) at the reference point with `completion=irq`: the adaptive
/// interrupt-then-poll mode is a boot option, so it cannot be a job key of the other boots.
fn lab_boots(matrix: &Matrix, runtime_ms: u64) -> Result<Vec<BootPlan>, String> {
    let mut boots = matrix.boots(runtime_ms)?;
    let policies = matrix.sweeps.last().expect("part (b) is the last sweep");
    if policies.devices.contains(&DeviceKind::MegasasGen2) {
        let mut adaptive = BootPlan {
            index: boots.len(),
            device: DeviceKind::MegasasGen2,
            smp: matrix.smp,
            mem: matrix.mem.to_string(),
            runtime_ms,
            options: vec![ADAPTIVE_OPTION.to_string()],
            defaults: Vec::new(),
            jobs: Vec::new(),
        };
        for &cpus in policies.cpus {
            for &quiesce in policies.quiesce {
                let point = Point {
                    device: DeviceKind::MegasasGen2,
                    rw: policies.rw[0],
                    bs: policies.bs[0],
                    iodepth: policies.iodepth[0],
                    cpus,
                    completion: Completion::Irq,
                    quiesce,
                };
                adaptive.jobs.push(PlannedJob {
                    name: point.job_name(),
                    point,
                });
            }
        }
        boots.push(adaptive);
    }
    Ok(boots)
}

/// Indices of the boots that run with the adaptive completion mode.
fn adaptive_boots(boots: &[BootPlan]) -> Vec<usize> {
    boots
        .iter()
        .filter(|b| b.options.iter().any(|o| o == ADAPTIVE_OPTION))
        .map(|b| b.index)
        .collect()
}

/// `cargo xtask lab [--quick] [--device null|md|nvme|fusion|all] ...`.
pub fn cmd_lab(args: &[String]) -> Result<bool, String> {
    let opts = LabOptions::parse(args)?;
    let matrix = lab_matrix(opts.quick, opts.device.kinds());
    let out_dir = crate::root().join("target/lab");
    if opts.replot {
        let path = out_dir.join("results.json");
        let text = std::fs::read_to_string(&path).map_err(|e| format!("reading {}: {e}", path.display()))?;
        let records = results::from_json(&text)?;
        let ok = crate::bench::write_outputs(&records, &matrix, &out_dir, false)?;
        let adaptive = adaptive_boots(&lab_boots(&matrix, opts.runtime_ms.unwrap_or(matrix.runtime_ms))?);
        let lab_ok = write_lab_outputs(&records, &adaptive, &out_dir)?;
        return Ok(ok && lab_ok && records.iter().all(Record::ok));
    }
    let runtime_ms = opts.runtime_ms.unwrap_or(matrix.runtime_ms);
    let mut boots = lab_boots(&matrix, runtime_ms)?;
    if opts.trace_every != 0 {
        for b in &mut boots {
            b.defaults.push(format!("trace={}", opts.trace_every));
        }
    }
    if opts.list {
        for b in &boots {
            println!(
                "boot {:>2}: {} -smp {} -m {}, {} jobs\n  kernel: {}",
                b.index,
                b.device.key(),
                b.smp,
                b.mem,
                b.jobs.len(),
                b.kernel_args().join(" ")
            );
        }
        return Ok(true);
    }
    if opts.accel == Accel::Kvm && !Path::new("/dev/kvm").exists() {
        return Err("--kvm: /dev/kvm does not exist on this machine; run without --kvm (TCG)".into());
    }
    crate::setup::ensure_qemu()?;
    let kernel = crate::build_kernel(opts.debug)?;
    let bench_opts = crate::bench::Options {
        matrix: matrix.name.to_string(),
        list: false,
        runtime_ms: Some(runtime_ms),
        repeat: 1,
        debug: opts.debug,
        accel: opts.accel,
        verbose: opts.verbose,
        replot: false,
        ipio: false,
    };
    let clean = crate::bench::run_matrix(&matrix, &boots, &kernel, &bench_opts, runtime_ms, &out_dir)?;
    let path = out_dir.join("results.json");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let records = results::from_json(&text)?;
    let lab_ok = write_lab_outputs(&records, &adaptive_boots(&boots), &out_dir)?;
    if opts.trace_every != 0 {
        write_trace(&out_dir)?;
    }
    Ok(clean && lab_ok)
}

/// Turns the `BAREMQ-TRACE:` lines of the run's boot logs into `trace.json` (Chrome trace format).
fn write_trace(out_dir: &Path) -> Result<(), String> {
    let logs = out_dir.join("logs");
    let mut names: Vec<std::path::PathBuf> = std::fs::read_dir(&logs)
        .map_err(|e| format!("reading {}: {e}", logs.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    names.sort();
    let mut traces = Vec::new();
    for path in names {
        let text = std::fs::read_to_string(&path).map_err(|e| format!("reading {}: {e}", path.display()))?;
        let boot = path
            .file_stem()
            .map_or_else(String::new, |s| s.to_string_lossy().into_owned());
        for (i, line) in text.lines().enumerate() {
            if let Some(json) = line.strip_prefix(workload::TRACE_PREFIX) {
                let t = parse_trace_line(json).map_err(|e| format!("{}:{}: {e}", path.display(), i + 1))?;
                traces.push((format!("{boot}: {}", t.job), t));
            }
        }
    }
    if traces.is_empty() {
        return Err("lab --trace: the boot logs hold no BAREMQ-TRACE line".into());
    }
    let path = out_dir.join("trace.json");
    let json = serde_json::to_string(&chrome_trace(&traces)).map_err(|e| format!("trace.json: {e}"))?;
    std::fs::write(&path, json).map_err(|e| format!("writing {}: {e}", path.display()))?;
    println!(
        "lab: wrote target/lab/trace.json ({} jobs): open it in https://ui.perfetto.dev or chrome://tracing",
        traces.len()
    );
    Ok(())
}

/// One job's `BAREMQ-TRACE:` line.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
struct TraceLine {
    job: String,
    sample_every: u32,
    stages: Vec<String>,
    /// `[cpu, ns, request, stage]`.
    events: Vec<[u64; 4]>,
}

fn parse_trace_line(json: &str) -> Result<TraceLine, String> {
    let t: TraceLine = serde_json::from_str(json).map_err(|e| format!("bad BAREMQ-TRACE line: {e}"))?;
    if let Some(e) = t.events.iter().find(|e| e[3] as usize >= t.stages.len()) {
        return Err(format!(
            "bad BAREMQ-TRACE line: event {e:?} names stage {} of {}",
            e[3],
            t.stages.len()
        ));
    }
    Ok(t)
}

/// The Chrome trace of `traces` (one process per job): each traced request's stages become
/// slices from its previous event to reaching the stage, on the CPU where the stage happened.
/// Requests in flight at once would overlap, so each CPU has as many lanes (threads
/// `cpuN`, `cpuN.1`, ...) as it needs; a slice goes in the first lane free at its start.
fn chrome_trace(traces: &[(String, TraceLine)]) -> serde_json::Value {
    use serde_json::json;
    let mut events = Vec::new();
    for (pid, (name, t)) in traces.iter().enumerate() {
        let pid = pid + 1;
        events.push(json!({"name": "process_name", "ph": "M", "pid": pid,
            "args": {"name": format!("{name} (1 in {} requests)", t.sample_every)}}));
        let mut by_request: BTreeMap<u64, Vec<[u64; 4]>> = BTreeMap::new();
        for e in &t.events {
            by_request.entry(e[2]).or_default().push(*e);
        }
        // (cpu, start, end, stage, request)
        let mut slices: Vec<(u64, u64, u64, usize, u64)> = Vec::new();
        for (request, mut evs) in by_request {
            evs.sort_by_key(|e| (e[1], e[3]));
            for w in evs.windows(2) {
                slices.push((w[1][0], w[0][1], w[1][1], w[1][3] as usize, request));
            }
        }
        slices.sort_by_key(|s| (s.0, s.1, s.2));
        let t0 = t.events.iter().map(|e| e[1]).min().unwrap_or(0);
        // Per CPU: when each lane is free again.
        let mut lanes: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
        for (cpu, start, end, stage, request) in slices {
            let cpu_lanes = lanes.entry(cpu).or_default();
            let lane = match cpu_lanes.iter().position(|&free| free <= start) {
                Some(l) => l,
                None => {
                    cpu_lanes.push(0);
                    cpu_lanes.len() - 1
                }
            };
            cpu_lanes[lane] = end;
            events.push(json!({
                "name": t.stages[stage], "cat": "stage", "ph": "X", "pid": pid,
                "tid": cpu * 1000 + lane as u64,
                "ts": (start - t0) as f64 / 1000.0, "dur": (end - start) as f64 / 1000.0,
                "args": {"request": request, "ns": end - start},
            }));
        }
        for (cpu, cpu_lanes) in lanes {
            for lane in 0..cpu_lanes.len() {
                let tid = cpu * 1000 + lane as u64;
                let label = if lane == 0 {
                    format!("cpu{cpu}")
                } else {
                    format!("cpu{cpu}.{lane}")
                };
                events.push(json!({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": label}}));
                events.push(json!({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid,
                    "args": {"sort_index": tid}}));
            }
        }
    }
    json!({"traceEvents": events, "displayTimeUnit": "ns"})
}

/// Prints the lab table and ratios, writes `lab.csv` and the lab plots. False when a plot failed.
/// `adaptive`: indices of the boots run with `megasas.irq_poll=on` (their rows are labelled
/// "adaptive" and kept out of the ratios and charts, which compare quiesce designs).
fn write_lab_outputs(records: &[Record], adaptive: &[usize], out_dir: &Path) -> Result<bool, String> {
    println!("\n{}", render_table(records, adaptive));
    let plain: Vec<Record> = records
        .iter()
        .filter(|r| !adaptive.contains(&r.boot))
        .cloned()
        .collect();
    println!("{}", render_ratios(&plain));
    let csv = out_dir.join("lab.csv");
    std::fs::write(&csv, table_csv(records, adaptive)).map_err(|e| format!("writing {}: {e}", csv.display()))?;
    let mut ok = true;
    for chart in lab_charts(&plain) {
        let path = out_dir.join(chart.file);
        if let Err(e) = plots::draw(&chart, &path) {
            println!("lab: plot {} FAILED: {e}", chart.file);
            ok = false;
        }
    }
    println!("lab: wrote target/lab/results.json, results.csv, lab.csv and plots (lab_quiesce_*.svg and the bench's)");
    Ok(ok)
}

/// One row of the lab table.
#[derive(Debug, Clone, PartialEq)]
struct Row {
    point: Point,
    mb_s: f64,
    iops: u64,
    p99_ns: u64,
    locks: Option<u64>,
    contended: Option<u64>,
    parks: Option<u64>,
    ipis_per_io: Option<f64>,
    irqs_per_io: Option<f64>,
    ok: bool,
    /// Run with `megasas.irq_poll=on`.
    adaptive: bool,
}

fn per_io(r: &Record, names: &[&str]) -> Option<f64> {
    let total = names.iter().find_map(|n| r.report.counter_total(n))?;
    (r.report.ios > 0).then(|| total as f64 / r.report.ios as f64)
}

fn row(r: &Record, adaptive: &[usize]) -> Row {
    let rep = &r.report;
    Row {
        point: r.point,
        mb_s: rep.bw_bytes as f64 / 1e6,
        iops: rep.iops,
        p99_ns: rep.lat_ns.p99,
        locks: rep.counter_total("hot_path_locks"),
        contended: rep.counter_total("lock_contended"),
        parks: rep.counter_total("lock_sleeps"),
        ipis_per_io: per_io(r, &["ipis", "completion_ipis"]),
        irqs_per_io: per_io(r, &["device_irqs_all_cpus", "device_irqs"]),
        ok: r.ok(),
        adaptive: adaptive.contains(&r.boot),
    }
}

/// Rows in table order: device, workload, completion, CPUs, depth, quiesce.
fn rows(records: &[Record], adaptive: &[usize]) -> Vec<Row> {
    let mut rows: Vec<Row> = records.iter().map(|r| row(r, adaptive)).collect();
    rows.sort_by_key(|r| {
        let p = r.point;
        (
            p.device,
            p.rw,
            p.bs,
            r.adaptive,
            p.completion,
            p.cpus,
            p.iodepth,
            p.quiesce,
        )
    });
    rows
}

fn opt_u64(v: Option<u64>) -> String {
    v.map_or_else(|| "-".into(), |v| v.to_string())
}

fn opt_f64(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.3}"))
}

/// The lab table, one line per job.
/// The completion column: the policy, or "adaptive" for the `megasas.irq_poll=on` boot.
fn completion_label(r: &Row) -> &'static str {
    if r.adaptive {
        "adaptive"
    } else {
        r.point.completion.as_str()
    }
}

fn render_table(records: &[Record], adaptive: &[usize]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<11} {:<12} {:<10} {:>4} {:>4} {:<9} {:>9} {:>9} {:>10} {:>9} {:>9} {:>8} {:>8} {:>8}",
        "device",
        "workload",
        "completion",
        "cpus",
        "qd",
        "quiesce",
        "MB/s",
        "IOPS",
        "p99 us",
        "locks",
        "contended",
        "parks",
        "ipis/io",
        "irqs/io"
    );
    for r in rows(records, adaptive) {
        let p = r.point;
        let _ = writeln!(
            s,
            "{:<11} {:<12} {:<10} {:>4} {:>4} {:<9} {:>9.1} {:>9} {:>10} {:>9} {:>9} {:>8} {:>8} {:>8}{}",
            p.device.label(),
            format!("{} {}", p.rw.as_str(), size_word(u64::from(p.bs))),
            completion_label(&r),
            p.cpus,
            p.iodepth,
            p.quiesce.as_str(),
            r.mb_s,
            r.iops,
            micros(r.p99_ns),
            opt_u64(r.locks),
            opt_u64(r.contended),
            opt_u64(r.parks),
            opt_f64(r.ipis_per_io),
            opt_f64(r.irqs_per_io),
            if r.ok { "" } else { "  FAILED" }
        );
    }
    s
}

/// Throughput of `studied` over the lock-free twin of the same point.
#[derive(Debug, Clone, PartialEq)]
struct Ratio {
    point: Point,
    mb_s: (f64, f64),
}

impl Ratio {
    fn value(&self) -> f64 {
        if self.mb_s.1 > 0.0 {
            self.mb_s.0 / self.mb_s.1
        } else {
            f64::NAN
        }
    }
}

/// For every successful job under `studied`, its MB/s over the lock-free job at the same point.
fn ratios(records: &[Record], studied: Quiesce) -> Vec<Ratio> {
    let ok: Vec<&Record> = records.iter().filter(|r| r.ok()).collect();
    let mut out: Vec<Ratio> = ok
        .iter()
        .filter(|r| r.point.quiesce == studied)
        .filter_map(|a| {
            let twin = Point {
                quiesce: Quiesce::LockFree,
                ..a.point
            };
            let b = ok.iter().find(|b| b.point == twin)?;
            Some(Ratio {
                point: a.point,
                mb_s: (a.report.bw_bytes as f64 / 1e6, b.report.bw_bytes as f64 / 1e6),
            })
        })
        .collect();
    out.sort_by_key(|r| {
        let p = r.point;
        (p.device, p.rw, p.bs, p.completion, p.cpus, p.iodepth)
    });
    out
}

/// The two ratio tables (sleeping/lockfree, locked/lockfree) with geometric means.
fn render_ratios(records: &[Record]) -> String {
    let mut s = String::new();
    let sleeping = ratios(records, Quiesce::Sleeping);
    let locked = ratios(records, Quiesce::Locked);
    let _ = writeln!(
        s,
        "throughput ratios (MB/s of the variant / MB/s lock-free, same point, same run; below 1: slower)"
    );
    let _ = writeln!(
        s,
        "{:<11} {:<12} {:<10} {:>4} {:>4} {:>17} {:>15}",
        "device", "workload", "completion", "cpus", "qd", "sleeping/lockfree", "locked/lockfree"
    );
    let mut keys: Vec<Point> = sleeping
        .iter()
        .chain(&locked)
        .map(|r| Point {
            quiesce: Quiesce::LockFree,
            ..r.point
        })
        .collect();
    keys.sort_by_key(|p| (p.device, p.rw, p.bs, p.completion, p.cpus, p.iodepth));
    keys.dedup();
    let find = |list: &[Ratio], p: &Point| {
        list.iter()
            .find(|r| {
                r.point.quiesce != Quiesce::LockFree
                    && Point {
                        quiesce: Quiesce::LockFree,
                        ..r.point
                    } == *p
            })
            .map_or_else(|| "-".to_string(), |r| format!("{:.2}x", r.value()))
    };
    for p in &keys {
        let _ = writeln!(
            s,
            "{:<11} {:<12} {:<10} {:>4} {:>4} {:>17} {:>15}",
            p.device.label(),
            format!("{} {}", p.rw.as_str(), size_word(u64::from(p.bs))),
            p.completion.as_str(),
            p.cpus,
            p.iodepth,
            find(&sleeping, p),
            find(&locked, p)
        );
    }
    for (name, list) in [("sleeping/lockfree", &sleeping), ("locked/lockfree", &locked)] {
        if let Some(g) = geomean(list.iter().map(Ratio::value)) {
            let _ = writeln!(s, "geometric mean {name}: {g:.2}x over {} points", list.len());
        }
    }
    s
}

fn geomean(values: impl Iterator<Item = f64>) -> Option<f64> {
    let logs: Vec<f64> = values.filter(|v| v.is_finite() && *v > 0.0).map(f64::ln).collect();
    (!logs.is_empty()).then(|| (logs.iter().sum::<f64>() / logs.len() as f64).exp())
}

/// The lab table as CSV (one line per job).
fn table_csv(records: &[Record], adaptive: &[usize]) -> String {
    let mut s = String::from(
        "device,rw,bs,completion,cpus,iodepth,quiesce,mb_s,iops,p99_ns,hot_path_locks,lock_contended,lock_sleeps,ipis_per_io,irqs_per_io,ok\n",
    );
    let blank = |v: String| if v == "-" { String::new() } else { v };
    for r in rows(records, adaptive) {
        let p = r.point;
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{},{:.3},{},{},{},{},{},{},{},{}",
            p.device.key(),
            p.rw.as_str(),
            p.bs,
            completion_label(&r),
            p.cpus,
            p.iodepth,
            p.quiesce.as_str(),
            r.mb_s,
            r.iops,
            r.p99_ns,
            blank(opt_u64(r.locks)),
            blank(opt_u64(r.contended)),
            blank(opt_u64(r.parks)),
            blank(opt_f64(r.ipis_per_io)),
            blank(opt_f64(r.irqs_per_io)),
            r.ok
        );
    }
    s
}

/// One chart per device and workload: MB/s per (CPUs, depth), one series per quiesce design,
/// completion on irq.
fn lab_charts(records: &[Record]) -> Vec<Chart> {
    let mut groups: BTreeMap<(DeviceKind, Rw, u32), Vec<&Record>> = BTreeMap::new();
    for r in records
        .iter()
        .filter(|r| r.ok() && r.point.completion == Completion::Irq)
    {
        groups
            .entry((r.point.device, r.point.rw, r.point.bs))
            .or_default()
            .push(r);
    }
    let mut out = Vec::new();
    for ((device, rw, bs), recs) in groups {
        let mut categories: Vec<(u32, u32)> = recs.iter().map(|r| (r.point.cpus, r.point.iodepth)).collect();
        categories.sort_unstable();
        categories.dedup();
        if categories.len() < 2 {
            continue;
        }
        let series = QUIESCE_ALL
            .iter()
            .map(|q| Series {
                name: q.as_str().to_string(),
                points: recs
                    .iter()
                    .filter(|r| r.point.quiesce == *q)
                    .filter_map(|r| {
                        let at = categories.iter().position(|c| *c == (r.point.cpus, r.point.iodepth))?;
                        Some((at, r.report.bw_bytes as f64 / 1e6))
                    })
                    .collect(),
            })
            .filter(|s| !s.points.is_empty())
            .collect();
        let file: &'static str = Box::leak(
            format!(
                "lab_quiesce_{}_{}{}.svg",
                device.key(),
                rw.as_str(),
                size_word(u64::from(bs))
            )
            .into_boxed_str(),
        );
        out.push(Chart {
            file,
            title: format!(
                "{}: {} {} MB/s by quiesce design (completion=irq)",
                device.label(),
                rw.as_str(),
                size_word(u64::from(bs))
            ),
            x_label: "CPUs / iodepth per CPU".into(),
            y_label: "MB/s".into(),
            categories: categories.iter().map(|(c, q)| format!("{c} CPU / qd {q}")).collect(),
            series,
            log_y: false,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::fake::{SimDevice, boot_console};
    use crate::bench::results::RunInfo;

    const FAST: SimDevice = SimDevice {
        latency_ns: 20_000,
        fail_every_lba: 0,
    };

    fn records(quick: bool) -> Vec<Record> {
        let matrix = lab_matrix(quick, &[DeviceKind::Null]);
        let run = RunInfo {
            matrix: matrix.name.into(),
            accel: "tcg".into(),
            runtime_ms: 5,
        };
        matrix
            .boots(5)
            .unwrap()
            .iter()
            .flat_map(|boot| {
                let r = results::collect_boot(&run, boot, 0, "x.log", &boot_console(boot, &FAST), Ok(()));
                assert!(r.ok(), "{:?}", r.boot_problems);
                r.records
            })
            .collect()
    }

    fn args(words: &str) -> Vec<String> {
        words.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn options_parse_and_refuse_bad_input_by_name() {
        let o = LabOptions::parse(&args("--quick --device md --runtime 300ms")).unwrap();
        assert!(o.quick);
        assert_eq!(o.device, DeviceChoice::Md);
        assert_eq!(o.runtime_ms, Some(300));
        let e = LabOptions::parse(&args("--device scsi")).unwrap_err();
        assert!(e.contains("--device 'scsi'"), "{e}");
        let e = LabOptions::parse(&args("--device")).unwrap_err();
        assert!(e.contains("--device needs a value"), "{e}");
        let e = LabOptions::parse(&args("--fast")).unwrap_err();
        assert!(e.contains("unknown option '--fast'"), "{e}");
        assert_eq!(DeviceChoice::Nvme.kinds(), &[DeviceKind::Nvme]);
        assert_eq!(
            LabOptions::parse(&args("--device fusion")).unwrap().device.kinds(),
            &[DeviceKind::Fusion]
        );
        assert_eq!(DeviceChoice::All.kinds().len(), 4);
        assert!(DeviceChoice::All.kinds().contains(&DeviceKind::Fusion));
        let e = LabOptions::parse(&args("--device mfi")).unwrap_err();
        assert!(e.contains("use null, md, nvme, fusion or all"), "{e}");
    }

    #[test]
    fn matrix_covers_every_quiesce_design_and_policy_and_fits_in_boots() {
        for quick in [true, false] {
            let m = lab_matrix(quick, DeviceChoice::All.kinds());
            let points = m.points();
            let cpus: &[u32] = if quick { &[1, 2] } else { &[1, 2, 4] };
            for q in QUIESCE_ALL {
                for &c in cpus {
                    for qd in [1, 8, 32] {
                        for (rw, bs) in [(Rw::Read, 128 * KB), (Rw::RandRead, 4 * KB)] {
                            assert!(
                                points.iter().any(|p| p.quiesce == *q
                                    && p.cpus == c
                                    && p.iodepth == qd
                                    && p.rw == rw
                                    && p.bs == bs
                                    && p.completion == Completion::Irq),
                                "{q:?} {c} {qd} {rw:?}"
                            );
                        }
                    }
                }
                for pol in Completion::ALL {
                    assert!(points.iter().any(|p| p.quiesce == *q && p.completion == pol));
                }
            }
            let boots = m.boots(m.runtime_ms).unwrap();
            // One device kind per boot, every point in exactly one boot.
            assert_eq!(boots.iter().map(|b| b.jobs.len()).sum::<usize>(), points.len());
            assert!(boots.iter().all(|b| b.jobs.iter().all(|j| j.point.device == b.device)));
            assert!(boots.iter().all(|b| b.smp == *cpus.last().unwrap()));
        }
    }

    #[test]
    fn table_has_a_line_per_job_with_counters_and_ratios_pair_twins() {
        let mut recs = records(true);
        // Counters as the kernel reports them: contention only under the locked designs.
        for r in &mut recs {
            let ios = r.report.ios;
            let (locks, contended, parks) = match r.point.quiesce {
                Quiesce::LockFree => (0, 0, 0),
                Quiesce::Locked => (ios, ios / 10, 0),
                Quiesce::Sleeping => (ios, ios / 5, ios / 5),
            };
            r.report.totals.insert("hot_path_locks".into(), locks);
            r.report.totals.insert("lock_contended".into(), contended);
            r.report.totals.insert("lock_sleeps".into(), parks);
            r.report.totals.insert("device_irqs_all_cpus".into(), 0);
        }
        let table = render_table(&recs, &[]);
        assert_eq!(table.lines().count(), recs.len() + 1);
        let header = table.lines().next().unwrap();
        for col in [
            "MB/s",
            "IOPS",
            "p99 us",
            "locks",
            "contended",
            "parks",
            "ipis/io",
            "irqs/io",
        ] {
            assert!(header.contains(col), "{header}");
        }
        let sl = recs
            .iter()
            .find(|r| r.point.quiesce == Quiesce::Sleeping && r.point.iodepth == 8 && r.point.rw == Rw::Read)
            .unwrap();
        let line = table
            .lines()
            .find(|l| {
                l.contains("read 128k")
                    && l.contains(" sleeping ")
                    && l.split_whitespace().nth(4) == Some(&sl.point.cpus.to_string())
                    && l.split_whitespace().nth(5) == Some("8")
            })
            .unwrap();
        let cols: Vec<&str> = line.split_whitespace().collect();
        // device(1 word) workload(2) completion cpus qd quiesce MB/s IOPS p99 locks contended parks ...
        assert_eq!(cols[8], sl.report.iops.to_string(), "{line}");
        assert_eq!(cols[10], sl.report.ios.to_string(), "{line}");
        assert_eq!(cols[11], (sl.report.ios / 5).to_string(), "{line}");
        assert_eq!(cols[14], "0.000", "{line}");

        let sleeping = ratios(&recs, Quiesce::Sleeping);
        let locked = ratios(&recs, Quiesce::Locked);
        let per_design = recs.iter().filter(|r| r.point.quiesce == Quiesce::LockFree).count();
        assert_eq!(sleeping.len(), per_design);
        assert_eq!(locked.len(), per_design);
        for r in &sleeping {
            let lf = recs
                .iter()
                .find(|x| {
                    x.point
                        == Point {
                            quiesce: Quiesce::LockFree,
                            ..r.point
                        }
                })
                .unwrap();
            assert_eq!(r.mb_s.1, lf.report.bw_bytes as f64 / 1e6);
        }
        let text = render_ratios(&recs);
        assert!(text.contains("geometric mean sleeping/lockfree"), "{text}");
        assert!(text.contains("geometric mean locked/lockfree"), "{text}");

        let csv = table_csv(&recs, &[]);
        assert_eq!(csv.lines().count(), recs.len() + 1);
        assert!(csv.lines().all(|l| l.split(',').count() == 16), "{csv}");
    }

    #[test]
    fn a_failed_job_is_marked_and_left_out_of_the_ratios() {
        let mut recs = records(true);
        let victim = recs
            .iter_mut()
            .find(|r| r.point.quiesce == Quiesce::LockFree && r.point.completion == Completion::Irq)
            .unwrap();
        victim.problems.push("verify failed".into());
        let victim_point = victim.point;
        assert!(render_table(&recs, &[]).contains("FAILED"));
        assert!(ratios(&recs, Quiesce::Sleeping).iter().all(|r| Point {
            quiesce: Quiesce::LockFree,
            ..r.point
        } != victim_point));
    }

    #[test]
    fn fusion_runs_part_a_and_b_on_mf0_with_the_fusion_qemu() {
        for quick in [true, false] {
            let m = lab_matrix(quick, DeviceChoice::Fusion.kinds());
            let boots = lab_boots(&m, m.runtime_ms).unwrap();
            assert!(!boots.is_empty());
            assert!(adaptive_boots(&boots).is_empty(), "Fusion has no adaptive boot");
            let cpus: &[u32] = if quick { &[1, 2] } else { &[1, 2, 4] };
            let points: Vec<Point> = boots.iter().flat_map(|b| b.jobs.iter().map(|j| j.point)).collect();
            // Part (a): every quiesce design, CPU count and depth, both workloads.
            for q in QUIESCE_ALL {
                for &c in cpus {
                    for qd in [1, 8, 32] {
                        for (rw, bs) in [(Rw::Read, 128 * KB), (Rw::RandRead, 4 * KB)] {
                            let want = Point {
                                device: DeviceKind::Fusion,
                                rw,
                                bs,
                                iodepth: qd,
                                cpus: c,
                                completion: Completion::Irq,
                                quiesce: *q,
                            };
                            assert!(points.contains(&want), "{want}");
                        }
                    }
                }
            }
            for b in &boots {
                assert_eq!(b.device, DeviceKind::Fusion);
                assert_eq!(b.device.qemu_binary(), crate::bench::matrix::QemuBinary::Fusion);
                assert!(
                    crate::bench::qemu_binary_for(b.device, None).is_err(),
                    "a Fusion boot never falls back to the system QEMU"
                );
                let fusion_qemu = Path::new("/cache/qemu-fusion/bin/qemu-system-x86_64");
                assert_eq!(
                    crate::bench::qemu_binary_for(b.device, Some(fusion_qemu)).unwrap(),
                    fusion_qemu
                );
                let words = b.kernel_args();
                assert!(words.iter().any(|w| w.starts_with("device=mf0")), "{words:?}");
                assert!(!words.iter().any(|w| w.starts_with("megasas.")), "{words:?}");
                let qemu = b.device.qemu_args(Path::new("/tmp/f.raw"));
                assert!(qemu.contains(&"megasas-fusion,id=fusion0,generation=invader".to_string()));
                assert!(qemu.contains(&"if=none,id=f0,file=/tmp/f.raw,format=raw,cache=unsafe".to_string()));
                assert_eq!(b.smp, *cpus.last().unwrap());
            }
            // The simulated device's console parses into one clean record per Fusion job.
            let run = RunInfo {
                matrix: m.name.into(),
                accel: "tcg".into(),
                runtime_ms: 5,
            };
            let short = m.boots(5).unwrap();
            let recs: Vec<Record> = short
                .iter()
                .flat_map(|boot| {
                    results::collect_boot(&run, boot, 0, "x.log", &boot_console(boot, &FAST), Ok(())).records
                })
                .collect();
            assert_eq!(recs.len(), points.len());
            assert!(recs.iter().all(|r| r.ok() && r.point.device == DeviceKind::Fusion));
            let table = render_table(&recs, &[]);
            assert_eq!(
                table.lines().filter(|l| l.starts_with("mf0 (Invader)")).count(),
                recs.len()
            );
        }
    }

    #[test]
    fn md_gets_one_adaptive_boot_with_part_b_on_irq_and_labelled_rows() {
        for quick in [true, false] {
            let m = lab_matrix(quick, DeviceChoice::Md.kinds());
            let boots = lab_boots(&m, m.runtime_ms).unwrap();
            let adaptive = adaptive_boots(&boots);
            assert_eq!(adaptive, vec![boots.len() - 1], "exactly one adaptive boot, the last");
            let last = boots.last().unwrap();
            assert!(last.kernel_args().contains(&ADAPTIVE_OPTION.to_string()));
            assert!(
                boots[..boots.len() - 1]
                    .iter()
                    .all(|b| !b.kernel_args().iter().any(|w| w == ADAPTIVE_OPTION))
            );
            let reference = if quick { 2 } else { 4 };
            assert_eq!(last.jobs.len(), QUIESCE_ALL.len());
            for (job, q) in last.jobs.iter().zip(QUIESCE_ALL) {
                let p = job.point;
                assert_eq!(
                    (p.device, p.rw, p.bs, p.iodepth),
                    (DeviceKind::MegasasGen2, Rw::RandRead, 4 * KB, 8)
                );
                assert_eq!((p.cpus, p.completion, p.quiesce), (reference, Completion::Irq, *q));
            }
            let rec = |boot: usize| Record {
                boot,
                ..records(quick)[0].clone()
            };
            assert!(rows(&[rec(last.index)], &adaptive)[0].adaptive);
            assert!(render_table(&[rec(last.index)], &adaptive).contains("adaptive"));
            assert!(!render_table(&[rec(0)], &adaptive).contains("adaptive"));
        }
        let null = lab_matrix(true, DeviceChoice::Null.kinds());
        assert!(
            adaptive_boots(&lab_boots(&null, 500).unwrap()).is_empty(),
            "no adaptive boot without md"
        );
    }

    #[test]
    fn trace_option_takes_an_optional_count() {
        assert_eq!(LabOptions::parse(&args("--trace")).unwrap().trace_every, 64);
        assert_eq!(LabOptions::parse(&args("--trace 8 --quick")).unwrap().trace_every, 8);
        let o = LabOptions::parse(&args("--trace --quick")).unwrap();
        assert_eq!((o.trace_every, o.quick), (64, true));
        assert_eq!(LabOptions::parse(&args("--quick")).unwrap().trace_every, 0);
        let e = LabOptions::parse(&args("--trace 0")).unwrap_err();
        assert!(e.contains("--trace '0'"), "{e}");
    }

    #[test]
    fn chrome_trace_puts_each_stage_on_its_cpu_without_overlap_in_a_lane() {
        let ev = |cpu, ns, request, stage| workload::StageEvent {
            cpu,
            ns,
            request,
            stage,
        };
        // Two requests in flight at once on cpu0, completing on cpu1 (remote), in ring order.
        let events = [
            ev(0, 1_000, 1, 0),
            ev(0, 1_100, 2, 0),
            ev(0, 1_200, 1, 1),
            ev(0, 1_300, 2, 1),
            ev(1, 2_000, 1, 3),
            ev(1, 2_100, 2, 3),
            ev(0, 2_500, 1, 6),
            ev(0, 2_600, 2, 6),
        ];
        let line = workload::stages::trace_line("jobA", 8, &events);
        let t = parse_trace_line(line.trim_end().strip_prefix(workload::TRACE_PREFIX).unwrap()).unwrap();
        assert_eq!((t.job.as_str(), t.sample_every, t.events.len()), ("jobA", 8, 8));
        let trace = chrome_trace(&[("boot0: jobA".into(), t)]);
        let all = trace["traceEvents"].as_array().unwrap();
        let slices: Vec<&serde_json::Value> = all.iter().filter(|e| e["ph"] == "X").collect();
        assert_eq!(slices.len(), 6, "3 stages after submit per request");
        // device_complete slices are on cpu1, the rest on cpu0 (tid = cpu * 1000 + lane).
        for s in &slices {
            let cpu = s["tid"].as_u64().unwrap() / 1000;
            assert_eq!(cpu, u64::from(s["name"] == "device_complete"), "{s}");
        }
        // Within a lane, slices never overlap.
        let mut by_tid: BTreeMap<u64, Vec<(f64, f64)>> = BTreeMap::new();
        for s in &slices {
            let ts = s["ts"].as_f64().unwrap();
            by_tid
                .entry(s["tid"].as_u64().unwrap())
                .or_default()
                .push((ts, ts + s["dur"].as_f64().unwrap()));
        }
        assert!(by_tid.len() >= 3, "overlapping requests need a second lane: {by_tid:?}");
        for v in by_tid.values_mut() {
            v.sort_by(|a, b| a.0.total_cmp(&b.0));
            assert!(v.windows(2).all(|w| w[0].1 <= w[1].0), "{v:?}");
        }
        let dc = slices
            .iter()
            .find(|s| s["name"] == "device_complete" && s["args"]["request"] == 1)
            .unwrap();
        assert_eq!(dc["args"]["ns"], 800);
        assert!(all.iter().any(|e| e["ph"] == "M" && e["args"]["name"] == "cpu1"));
        let bad = parse_trace_line(r#"{"job":"x","sample_every":1,"stages":["submit"],"events":[[0,1,1,5]]}"#);
        assert!(bad.unwrap_err().contains("names stage 5"));
    }

    #[test]
    fn charts_have_one_series_per_design_and_draw() {
        let recs = records(true);
        let charts = lab_charts(&recs);
        assert_eq!(charts.len(), 2, "seq 128k and rand 4k on null0");
        for c in &charts {
            assert_eq!(c.series.len(), 3);
            assert_eq!(c.categories.len(), 6, "2 CPU counts x 3 depths");
        }
        let dir = std::env::temp_dir().join(format!("baremq-lab-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(charts[0].file);
        plots::draw(&charts[0], &path).unwrap();
        assert!(std::fs::read_to_string(&path).unwrap().contains("<svg"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
