//! The stdout summary: a table of every job, and ratios between jobs of the same run that differ
//! in one parameter only (the machine is shared and noisy, so only same-run comparisons mean much).

use std::fmt::Write as _;

use super::matrix::{Completion, DeviceKind, Point, Quiesce, size_word};
use super::results::{Record, micros};

/// Kernel counters shown per I/O in the table: the column heading and the counter names that
/// feed it, first found wins (the kernel's whole-job totals, then per-CPU counters; the fake
/// kernel of the tests uses the short names).
const PER_IO_COLUMNS: &[(&str, &[&str])] = &[
    ("irqs/io", &["device_irqs_all_cpus", "device_irqs", "irqs"]),
    ("ipis/io", &["ipis", "completion_ipis"]),
    ("locks/io", &["hot_path_locks"]),
];

/// Per-I/O value of the first of `names` the report has.
fn per_io(record: &Record, names: &[&str]) -> Option<f64> {
    let rep = &record.report;
    let total = names.iter().find_map(|n| rep.counter_total(n))?;
    (rep.ios > 0).then(|| total as f64 / rep.ios as f64)
}

/// One pair of jobs that differ in one parameter.
#[derive(Debug, Clone, PartialEq)]
pub struct Pair {
    /// The parameters they share, for humans.
    pub context: String,
    /// IOPS of the job under study and of its reference.
    pub iops: (u64, u64),
    /// p99 latency (ns) of the job under study and of its reference.
    pub p99_ns: (u64, u64),
}

impl Pair {
    /// IOPS of the studied job over the reference's (above 1: faster).
    pub fn iops_ratio(&self) -> f64 {
        ratio(self.iops.0, self.iops.1)
    }

    /// p99 of the studied job over the reference's (below 1: lower tail latency).
    pub fn p99_ratio(&self) -> f64 {
        ratio(self.p99_ns.0, self.p99_ns.1)
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 { f64::NAN } else { a as f64 / b as f64 }
}

/// A family of pairs: "A vs B".
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    /// E.g. `lock-free vs locked quiesce`.
    pub title: String,
    /// The pairs found in the run.
    pub pairs: Vec<Pair>,
}

impl Comparison {
    /// Geometric means of the IOPS and p99 ratios over the pairs with finite ratios.
    pub fn geomean(&self) -> Option<(f64, f64)> {
        let mean = |values: Vec<f64>| {
            let logs: Vec<f64> = values
                .into_iter()
                .filter(|v| v.is_finite() && *v > 0.0)
                .map(f64::ln)
                .collect();
            (!logs.is_empty()).then(|| (logs.iter().sum::<f64>() / logs.len() as f64).exp())
        };
        Some((
            mean(self.pairs.iter().map(Pair::iops_ratio).collect())?,
            mean(self.pairs.iter().map(Pair::p99_ratio).collect()).unwrap_or(f64::NAN),
        ))
    }
}

fn describe(p: &Point, skip: &str) -> String {
    let mut parts = Vec::new();
    if skip != "device" {
        parts.push(p.device.label().to_string());
    }
    parts.push(format!("{} {}", p.rw.as_str(), size_word(u64::from(p.bs))));
    parts.push(format!("qd{}", p.iodepth));
    if skip != "cpus" {
        parts.push(format!("{}cpu", p.cpus));
    }
    if skip != "completion" {
        parts.push(p.completion.as_str().to_string());
    }
    if skip != "quiesce" {
        parts.push(p.quiesce.as_str().to_string());
    }
    parts.join(" ")
}

/// Pairs of clean records where `studied(a)` and `reference(b)` hold and the points are equal once
/// `normalise` has erased the compared parameter.
fn pairs(
    records: &[Record],
    studied: impl Fn(&Point) -> bool,
    reference: impl Fn(&Point) -> bool,
    normalise: impl Fn(Point) -> Point,
    skip: &str,
) -> Vec<Pair> {
    let ok: Vec<&Record> = records.iter().filter(|r| r.ok()).collect();
    let mut out = Vec::new();
    for a in ok.iter().filter(|r| studied(&r.point)) {
        if let Some(b) = ok
            .iter()
            .find(|b| reference(&b.point) && normalise(b.point) == normalise(a.point))
        {
            out.push(Pair {
                context: describe(&a.point, skip),
                iops: (a.report.iops, b.report.iops),
                p99_ns: (a.report.lat_ns.p99, b.report.lat_ns.p99),
            });
        }
    }
    out
}

/// Every comparison the run allows (empty ones are left out).
pub fn comparisons(records: &[Record]) -> Vec<Comparison> {
    let mut out = vec![Comparison {
        title: "lock-free vs locked quiesce".into(),
        pairs: pairs(
            records,
            |p| p.quiesce == Quiesce::LockFree,
            |p| p.quiesce == Quiesce::Locked,
            |p| Point {
                quiesce: Quiesce::LockFree,
                ..p
            },
            "quiesce",
        ),
    }];
    out.push(Comparison {
        title: "lock-free vs sleeping quiesce".into(),
        pairs: pairs(
            records,
            |p| p.quiesce == Quiesce::LockFree,
            |p| p.quiesce == Quiesce::Sleeping,
            |p| Point {
                quiesce: Quiesce::LockFree,
                ..p
            },
            "quiesce",
        ),
    });
    for studied in [
        Completion::Remote,
        Completion::Local,
        Completion::Poll,
        Completion::Adaptive,
    ] {
        out.push(Comparison {
            title: format!("{} vs irq completion", studied.as_str()),
            pairs: pairs(
                records,
                |p| p.completion == studied,
                |p| p.completion == Completion::Irq,
                |p| Point {
                    completion: Completion::Irq,
                    ..p
                },
                "completion",
            ),
        });
    }
    out.push(Comparison {
        title: "adaptive vs poll completion".into(),
        pairs: pairs(
            records,
            |p| p.completion == Completion::Adaptive,
            |p| p.completion == Completion::Poll,
            |p| Point {
                completion: Completion::Poll,
                ..p
            },
            "completion",
        ),
    });
    let mut cpu_counts: Vec<u32> = records.iter().map(|r| r.point.cpus).filter(|&c| c > 1).collect();
    cpu_counts.sort_unstable();
    cpu_counts.dedup();
    for n in cpu_counts {
        out.push(Comparison {
            title: format!("{n} CPUs vs 1 CPU"),
            pairs: pairs(
                records,
                |p| p.cpus == n,
                |p| p.cpus == 1,
                |p| Point { cpus: 1, ..p },
                "cpus",
            ),
        });
    }
    for device in [
        DeviceKind::MegasasGen2,
        DeviceKind::Megasas,
        DeviceKind::Nvme,
        DeviceKind::Fusion,
    ] {
        out.push(Comparison {
            title: format!("{} vs null0", device.label()),
            pairs: pairs(
                records,
                |p| p.device == device,
                |p| p.device == DeviceKind::Null,
                |p| Point {
                    device: DeviceKind::Null,
                    ..p
                },
                "device",
            ),
        });
    }
    out.retain(|c| !c.pairs.is_empty());
    out
}

fn fmt_ratio(r: f64) -> String {
    if r.is_finite() {
        format!("{r:.2}x")
    } else {
        "n/a".into()
    }
}

/// The clean runs of one point (one per `--repeat` pass), summarised.
#[derive(Debug, Clone, PartialEq)]
pub struct PointSummary {
    /// The run with the median IOPS, with the medians over all runs written into its IOPS,
    /// bandwidth and latency figures. Counters stay those of that run.
    pub record: Record,
    /// Clean runs of the point.
    pub runs: usize,
    /// Lowest and highest IOPS over the runs.
    pub iops_range: (u64, u64),
}

impl PointSummary {
    /// (highest - lowest) / median IOPS: how far apart the runs were.
    pub fn spread(&self) -> f64 {
        ratio(self.iops_range.1 - self.iops_range.0, self.record.report.iops)
    }
}

/// Median of `values` (the mean of the two middle values when there is an even number of them).
fn median(mut values: Vec<u64>) -> u64 {
    values.sort_unstable();
    let n = values.len();
    match n {
        0 => 0,
        _ if n % 2 == 1 => values[n / 2],
        _ => ((u128::from(values[n / 2 - 1]) + u128::from(values[n / 2])) / 2) as u64,
    }
}

/// One summary per point with at least one clean run, in the order points first appear.
pub fn medians(records: &[Record]) -> Vec<PointSummary> {
    // Matrix order: where a point first appears, clean or not.
    let mut points: Vec<Point> = Vec::new();
    for r in records {
        if !points.contains(&r.point) {
            points.push(r.point);
        }
    }
    points.retain(|p| records.iter().any(|r| r.ok() && r.point == *p));
    points
        .into_iter()
        .map(|point| {
            let mut runs: Vec<&Record> = records.iter().filter(|r| r.ok() && r.point == point).collect();
            runs.sort_by_key(|r| r.report.iops);
            let of = |f: fn(&Record) -> u64| median(runs.iter().map(|r| f(r)).collect());
            let mut record = runs[(runs.len() - 1) / 2].clone();
            let rep = &mut record.report;
            rep.iops = of(|r| r.report.iops);
            rep.bw_bytes = of(|r| r.report.bw_bytes);
            rep.lat_ns.mean = of(|r| r.report.lat_ns.mean);
            rep.lat_ns.p50 = of(|r| r.report.lat_ns.p50);
            rep.lat_ns.p90 = of(|r| r.report.lat_ns.p90);
            rep.lat_ns.p99 = of(|r| r.report.lat_ns.p99);
            rep.lat_ns.p99_9 = of(|r| r.report.lat_ns.p99_9);
            rep.lat_ns.p99_99 = of(|r| r.report.lat_ns.p99_99);
            PointSummary {
                record,
                runs: runs.len(),
                iops_range: (runs[0].report.iops, runs[runs.len() - 1].report.iops),
            }
        })
        .collect()
}

/// The result as a fraction of the device floor the kernel measured before the job
/// (`floor_qd1_iops` for QD 1, `floor_qd32_iops` above); `None` without a floor.
pub fn floor_fraction(record: &Record) -> Option<f64> {
    let key = if record.report.job.iodepth <= 1 {
        "floor_qd1_iops"
    } else {
        "floor_qd32_iops"
    };
    let floor = *record.report.totals.get(key)?;
    (floor > 0).then(|| record.report.iops as f64 / floor as f64)
}

/// The per-point table (medians when points ran more than once), failed runs, then the
/// comparisons.
pub fn render(records: &[Record]) -> String {
    let summaries = medians(records);
    let repeated = summaries.iter().any(|p| p.runs > 1);
    let columns: Vec<&(&str, &[&str])> = PER_IO_COLUMNS
        .iter()
        .filter(|(_, names)| records.iter().any(|r| per_io(r, names).is_some()))
        .collect();
    let with_floor = records.iter().any(|r| floor_fraction(r).is_some());
    let mut s = String::new();
    let _ = write!(
        s,
        "{:<11} {:<9} {:>4} {:>5} {:>4} {:<8} {:<8} {:>9} {:>8} {:>9} {:>9} {:>9}",
        "device", "rw", "bs", "qd", "cpus", "compl", "quiesce", "IOPS", "MB/s", "p50 us", "p99 us", "p99.9 us"
    );
    if repeated {
        let _ = write!(s, " {:>4} {:>6}", "runs", "spread");
    }
    for (heading, _) in &columns {
        let _ = write!(s, " {heading:>8}");
    }
    if with_floor {
        let _ = write!(s, " {:>8}", "of floor");
    }
    s.push('\n');
    for summary in &summaries {
        let r = &summary.record;
        let p = &r.point;
        let rep = &r.report;
        let qd = if u64::from(p.iodepth) == rep.job.iodepth {
            p.iodepth.to_string()
        } else {
            format!("{}>{}", p.iodepth, rep.job.iodepth)
        };
        let _ = write!(
            s,
            "{:<11} {:<9} {:>4} {:>5} {:>4} {:<8} {:<8} {:>9} {:>8} {:>9} {:>9} {:>9}",
            p.device.label(),
            p.rw.as_str(),
            size_word(u64::from(p.bs)),
            qd,
            p.cpus,
            p.completion.as_str(),
            p.quiesce.as_str(),
            rep.iops,
            super::results::megabytes(rep.bw_bytes),
            micros(rep.lat_ns.p50),
            micros(rep.lat_ns.p99),
            micros(rep.lat_ns.p99_9),
        );
        if repeated {
            let _ = write!(s, " {:>4} {:>5.0}%", summary.runs, summary.spread() * 100.0);
        }
        for (_, names) in &columns {
            let value = per_io(r, names).map_or("-".into(), |v| format!("{v:.3}"));
            let _ = write!(s, " {value:>8}");
        }
        if with_floor {
            let value = floor_fraction(r).map_or("-".into(), |v| format!("{v:.2}"));
            let _ = write!(s, " {value:>8}");
        }
        s.push('\n');
    }
    let failed: Vec<&Record> = records.iter().filter(|r| !r.ok()).collect();
    if !failed.is_empty() {
        let _ = writeln!(s, "\nfailed runs (left out of the table, the ratios and the plots):");
        for r in failed {
            let _ = writeln!(
                s,
                "  pass {} {} ({}): FAILED: {}",
                r.repeat,
                r.report.job.name,
                r.point,
                r.problems.join("; ")
            );
        }
    }
    let medians: Vec<Record> = summaries.into_iter().map(|p| p.record).collect();
    for c in comparisons(&medians) {
        let _ = writeln!(
            s,
            "\n{} (IOPS ratio >1: faster; p99 ratio <1: lower tail latency)",
            c.title
        );
        for pair in &c.pairs {
            let _ = writeln!(
                s,
                "  {:<44} IOPS {:>9} vs {:>9} = {:>7}   p99 {:>10} vs {:>10} us = {:>7}",
                pair.context,
                pair.iops.0,
                pair.iops.1,
                fmt_ratio(pair.iops_ratio()),
                micros(pair.p99_ns.0),
                micros(pair.p99_ns.1),
                fmt_ratio(pair.p99_ratio())
            );
        }
        if let Some((iops, p99)) = c.geomean() {
            let _ = writeln!(
                s,
                "  geometric mean over {} pairs: IOPS {}, p99 {}",
                c.pairs.len(),
                fmt_ratio(iops),
                fmt_ratio(p99)
            );
        }
    }
    s
}

/// `ratios.csv`: one row per pair of every comparison, over the medians of each point.
pub fn ratios_csv(records: &[Record]) -> String {
    let medians: Vec<Record> = medians(records).into_iter().map(|p| p.record).collect();
    let mut s = String::from("comparison,context,iops,iops_reference,iops_ratio,p99_us,p99_us_reference,p99_ratio\n");
    for c in comparisons(&medians) {
        for p in &c.pairs {
            let _ = writeln!(
                s,
                "{},{},{},{},{:.4},{},{},{:.4}",
                c.title,
                p.context,
                p.iops.0,
                p.iops.1,
                p.iops_ratio(),
                micros(p.p99_ns.0),
                micros(p.p99_ns.1),
                p.p99_ratio()
            );
        }
    }
    s
}
