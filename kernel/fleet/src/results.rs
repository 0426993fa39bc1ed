//! A run's engine reports as fio's results, and live counters as fio's ETA.
//!
//! The figures are the ones the kernel's own fio JSON document carries
//! (`workload::report::fio_output`), in fio's `thread_stat` units: bytes and I/Os per direction,
//! runtime in ms, slat/clat/lat as sample statistics and fio-layout histograms (the engine's
//! histograms have fio's 1856 buckets, so they travel bucket for bucket), bandwidth (KiB/s) and
//! IOPS samples, depth/submit/complete distributions, the ns/us/ms latency classes, the error.
//! One TS per fio `jobs[]` entry: a job's, or with `numjobs` and no `group_reporting` each
//! clone's ([`workload::report::FioJob::entries`]), as fio's server sends them.

use alloc::string::{String, ToString};
use alloc::vec::Vec;
use fioserver::stats::{DIRECTIONS, DirStats, DiskUtil, Eta, GroupRunStats, IoStat, PLAT_NR, ThreadStat};
use fioserver::{JobReport as TsReport, RunResults};
use workload::LatencyHistogram;
use workload::detail::SampleStats;
use workload::fio::FioRun;
use workload::hist::{BUCKETS, FIO_DEFAULT_PERCENTILES, PercentMicros};
use workload::report::fio_output::{Direction, directions, latency_classes};
use workload::report::{FioJob, FioJobMeta, VerifyResult};

// The engine's histograms are fio's layout, so their buckets are fio's buckets.
const _: () = assert!(BUCKETS == PLAT_NR);

/// fio's `error` for a job: EILSEQ (84) for a verify mismatch, EIO (5) for failed I/Os.
fn fio_error(report: &workload::JobReport) -> (u32, &'static str) {
    if report.verify.result == VerifyResult::Fail {
        (84, "verify mismatch")
    } else if report.errors > 0 {
        (5, "I/O error")
    } else {
        (0, "")
    }
}

/// Sample statistics of a latency histogram (ns).
fn io_stat_of(h: &LatencyHistogram) -> IoStat {
    let n = h.samples();
    if n == 0 {
        return IoStat::default();
    }
    let stddev = h.stddev_micros() as f64 / 1e6;
    IoStat {
        min: h.min(),
        max: h.max(),
        samples: n,
        mean: h.sum() as f64 / n as f64,
        // fio keeps the sum of squared deviations; its standard deviation is sqrt(S / (n - 1)).
        s: stddev * stddev * (n.saturating_sub(1)) as f64,
    }
}

/// Sample statistics of interval samples.
fn io_stat_of_samples(samples: impl IntoIterator<Item = u64>) -> IoStat {
    let st = SampleStats::of(samples);
    if st.samples == 0 {
        return IoStat::default();
    }
    let n = st.samples as f64;
    let sum = st.sum as f64;
    IoStat {
        min: st.min,
        max: st.max,
        samples: st.samples,
        mean: sum / n,
        s: (st.sum_of_squares as f64 - sum * sum / n).max(0.0),
    }
}

fn buckets_of(h: &LatencyHistogram) -> Vec<u64> {
    if h.samples() == 0 {
        return Vec::new();
    }
    (0..BUCKETS).map(|i| h.bucket_count(i)).collect()
}

fn dir_stats(d: &Direction<'_>, runtime_ms: u64) -> DirStats {
    // fio reports a direction's runtime only when it moved data in it.
    let runtime_ms = if d.ios > 0 { runtime_ms.max(1) } else { 0 };
    // Without the detail mode clat is the submit-to-reap latency, as in the kernel's document.
    let clat = d.clat.unwrap_or(d.lat);
    let empty = LatencyHistogram::new();
    let slat = d.slat.unwrap_or(&empty);
    DirStats {
        io_bytes: d.bytes,
        runtime_ms,
        total_ios: d.ios,
        short_ios: 0,
        drop_ios: 0,
        clat: io_stat_of(clat),
        slat: io_stat_of(slat),
        lat: io_stat_of(d.lat),
        bw: io_stat_of_samples(d.samples.iter().map(|s| s.bw_kib)),
        iops: io_stat_of_samples(d.samples.iter().map(|s| s.iops)),
        plat: [buckets_of(slat), buckets_of(clat), buckets_of(d.lat)],
    }
}

/// One job's TS. `index`: its place in the run (fio's thread number is index + 1).
pub fn thread_stat(
    report: &workload::JobReport,
    meta: &FioJobMeta,
    index: usize,
    percentiles: &[PercentMicros],
) -> ThreadStat {
    let detail = report.detail.as_ref();
    let runtime_ms = report.runtime_ns / 1_000_000;
    let (error, verror) = fio_error(report);
    let dirs = directions(report);
    let mut ts = ThreadStat {
        name: report.plan.spec.name.clone(),
        verror: verror.to_string(),
        error,
        thread_number: index as u32 + 1,
        groupid: meta.groupid,
        members: report.plan.cpus.len() as u32,
        dirs: [
            dir_stats(&dirs[0], runtime_ms),
            dir_stats(&dirs[1], runtime_ms),
            dir_stats(&dirs[2], runtime_ms),
        ],
        clat_percentiles: true,
        percentile_list: percentiles.iter().map(|&p| p as f64 / 1e6).collect(),
        total_run_time_ms: runtime_ms,
        first_error: error,
        total_err_count: report.errors,
        latency_depth: report.plan.iodepth,
        latency_percentile: 100.0,
        ..ThreadStat::default()
    };
    if let Some(d) = detail {
        // fio divides the depth counts by the job's I/Os, the verify pass's reads not included;
        // the engine counts every submission: scaled so the client shows the engine's shares.
        let depth_total: u64 = d.depth_at_submit.iter().sum();
        let ios: u64 = dirs.iter().map(|d| d.ios).sum();
        for (slot, &count) in ts.io_u_map.iter_mut().zip(&d.depth_at_submit) {
            *slot =
                u64::try_from(u128::from(count) * u128::from(ios) / u128::from(depth_total.max(1))).unwrap_or(u64::MAX);
        }
        // Every submission hands the block layer one request: fio's "1 to 4" bucket.
        let submitted: u64 = d.depth_at_submit.iter().sum();
        ts.io_u_submit = [0, submitted, 0, 0, 0, 0, 0];
        ts.io_u_complete = d.completions_per_reap;
        ts.total_submit = submitted;
        ts.total_complete = d.completions_per_reap.iter().sum();
        // fio's sys_cpu is sys_time over the job's runtime; the kernel's is busy time over the
        // CPUs' measured time: scaled so the client shows the kernel's share.
        if d.cpu_runtime_ns > 0 {
            ts.sys_time = u64::try_from(u128::from(d.busy_ns) * u128::from(runtime_ms) / u128::from(d.cpu_runtime_ns))
                .unwrap_or(u64::MAX);
        }
    }
    let mut clat = LatencyHistogram::new();
    for d in &dirs {
        clat.merge(d.clat.unwrap_or(d.lat));
    }
    let classes = latency_classes(&clat);
    ts.io_u_lat_n.copy_from_slice(&classes[0..10]);
    ts.io_u_lat_u.copy_from_slice(&classes[10..20]);
    ts.io_u_lat_m.copy_from_slice(&classes[20..32]);
    ts
}

/// What fio's START announces for a parsed run, as fio 3.33's server counts it while it reads
/// the job file (`get_new_job`): `jobs`, every clone of every job (fio's threads), and
/// `stat_outputs`, the TS reports [`run_results`] will send: a job's clones merged into one only
/// with `group_reporting`.
pub fn start_plan(run: &FioRun) -> fioserver::JobPlan {
    let mut plan = fioserver::JobPlan {
        jobs: 0,
        stat_outputs: 0,
    };
    for job in &run.jobs {
        plan.jobs += job.numjobs;
        plan.stat_outputs += if job.report.group_reporting { 1 } else { job.numjobs };
    }
    plan
}

/// A finished run as fio's results: a TS per fio `jobs[]` entry of the reports (in order: a
/// job's, or each of its clones'), a GS per group (index = fio's group id), a DU per device the
/// jobs used (its I/Os and sectors from the jobs' own counts), and `error` (0 when every job
/// passed).
pub fn run_results(
    reports: &[(workload::JobReport, FioJobMeta)],
    global_options: &[(String, String)],
    percentile_list: &[PercentMicros],
    all_passed: bool,
) -> RunResults {
    let percentiles: Vec<PercentMicros> = if percentile_list.is_empty() {
        FIO_DEFAULT_PERCENTILES.to_vec()
    } else {
        percentile_list.to_vec()
    };
    let jobs: Vec<TsReport> = reports
        .iter()
        .flat_map(|(report, meta)| FioJob { report, meta }.entries())
        .enumerate()
        .map(|(i, entry)| TsReport {
            stat: thread_stat(entry.report, entry.meta, i, &percentiles),
            options: entry.meta.job_options.clone(),
        })
        .collect();
    let groups = group_stats(jobs.iter().map(|j| &j.stat));
    let mut disks: Vec<DiskUtil> = Vec::new();
    for (report, _) in reports {
        let name = report.plan.device.name.clone();
        let runtime_ms = report.runtime_ns / 1_000_000;
        let i = match disks.iter().position(|d| d.name == name) {
            Some(i) => i,
            None => {
                disks.push(DiskUtil {
                    name,
                    ..DiskUtil::default()
                });
                disks.len() - 1
            }
        };
        let du = &mut disks[i];
        du.ios[0] += report.read.ios;
        du.ios[1] += report.write.ios;
        du.sectors[0] += report.read.bytes / 512;
        du.sectors[1] += report.write.bytes / 512;
        du.msec += runtime_ms;
    }
    RunResults {
        jobs,
        groups,
        global_options: global_options.to_vec(),
        disks,
        error: u32::from(!all_passed),
    }
}

/// fio's group figures from its members' TS: bytes summed, slowest and fastest runtime, lowest
/// and highest member bandwidth and the aggregate (bytes per second over the slowest member).
pub fn group_stats<'a>(stats: impl Iterator<Item = &'a ThreadStat>) -> Vec<GroupRunStats> {
    let mut groups: Vec<GroupRunStats> = Vec::new();
    let mut seen: Vec<bool> = Vec::new();
    for ts in stats {
        let g = ts.groupid as usize;
        if groups.len() <= g {
            groups.resize(g + 1, GroupRunStats::default());
            seen.resize(g + 1, false);
        }
        let group = &mut groups[g];
        for (dir, d) in ts.dirs.iter().enumerate() {
            if d.runtime_ms == 0 {
                continue;
            }
            let bw = d.io_bytes.saturating_mul(1000) / d.runtime_ms;
            if !seen[g] || group.max_run_ms[dir] == 0 {
                group.min_run_ms[dir] = d.runtime_ms;
                group.min_bw[dir] = bw;
            } else {
                group.min_run_ms[dir] = group.min_run_ms[dir].min(d.runtime_ms);
                group.min_bw[dir] = group.min_bw[dir].min(bw);
            }
            group.max_run_ms[dir] = group.max_run_ms[dir].max(d.runtime_ms);
            group.max_bw[dir] = group.max_bw[dir].max(bw);
            group.io_bytes[dir] += d.io_bytes;
        }
        seen[g] = true;
    }
    for group in &mut groups {
        for dir in 0..DIRECTIONS {
            group.agg_bw[dir] = group.io_bytes[dir]
                .saturating_mul(1000)
                .checked_div(group.max_run_ms[dir])
                .unwrap_or(0);
        }
    }
    groups
}

/// One running job's live figures, for the ETA.
#[derive(Debug, Clone, Copy, Default)]
pub struct LiveJob {
    /// Whether any of its CPUs still runs (or verifies).
    pub running: bool,
    /// Whether it only writes (its rate shows as write), or also reads.
    pub writes_only: bool,
    /// Bytes and I/Os completed so far.
    pub bytes: u64,
    pub ios: u64,
    /// The time the job is given (`runtime`), if it has one.
    pub runtime_ns: Option<u64>,
}

/// Turns successive readings of the live counters into fio's ETA: rates over the interval since
/// the last reading, elapsed time since the run started, time left from the jobs' runtimes.
#[derive(Debug, Default)]
pub struct EtaMeter {
    start_ns: u64,
    last: Option<(u64, u64, u64)>,
}

impl EtaMeter {
    pub fn new(start_ns: u64) -> Self {
        Self { start_ns, last: None }
    }

    pub fn eta(&mut self, now_ns: u64, jobs: &[LiveJob]) -> Eta {
        let bytes: u64 = jobs.iter().map(|j| j.bytes).sum();
        let ios: u64 = jobs.iter().map(|j| j.ios).sum();
        let (since_ns, bytes0, ios0) = self.last.unwrap_or((self.start_ns, 0, 0));
        let span = now_ns.saturating_sub(since_ns);
        let (rate, iops) = if span == 0 {
            (0, 0)
        } else {
            (
                // fio's ETA rates are KiB/s.
                u64::try_from(u128::from(bytes.saturating_sub(bytes0)) * 1_000_000_000 / 1024 / u128::from(span))
                    .unwrap_or(u64::MAX),
                u32::try_from(u128::from(ios.saturating_sub(ios0)) * 1_000_000_000 / u128::from(span))
                    .unwrap_or(u32::MAX),
            )
        };
        self.last = Some((now_ns, bytes, ios));
        let elapsed_ns = now_ns.saturating_sub(self.start_ns);
        let running = jobs.iter().filter(|j| j.running).count() as u32;
        let dir = usize::from(jobs.iter().filter(|j| j.running).all(|j| j.writes_only) && running > 0);
        let mut eta = Eta {
            nr_running: running,
            nr_threads: jobs.len() as u32,
            files_open: running,
            elapsed_sec: elapsed_ns / 1_000_000_000,
            eta_sec: jobs
                .iter()
                .filter(|j| j.running)
                .filter_map(|j| j.runtime_ns)
                .max()
                .map_or(0, |r| r.saturating_sub(elapsed_ns).div_ceil(1_000_000_000)),
            run_str: jobs.iter().map(|j| if j.running { 'R' } else { '_' }).collect(),
            ..Eta::default()
        };
        eta.rate[dir] = rate;
        eta.iops[dir] = iops;
        eta
    }
}
