//! What the engine measures for fio-shaped output, on top of baremq's own report: submission and
//! completion latency (`slat`/`clat`), the in-flight depth at each submission, the completions per
//! reap, the time each CPU spent idle, bandwidth and IOPS samples at a fixed interval (fio's
//! `bwavgtime`/`iopsavgtime`), and averaged log windows (fio's `log_avg_msec`).
//!
//! All of it is off unless the kernel asks for it with [`DetailOptions`] (through
//! `JobShared::with_detail`): the extra timestamp after each submission costs a clock read per I/O,
//! and the two extra histograms per direction cost 29 KiB per CPU. Everything is allocated when the
//! job starts; sample and log storage is bounded, and what does not fit is counted, not dropped
//! silently.

use alloc::vec::Vec;

use crate::hist::{LatencyHistogram, ratio_micros, stddev_micros};

/// fio's default interval of bandwidth and IOPS samples (`bwavgtime`, `iopsavgtime`): 500 ms.
pub const DEFAULT_SAMPLE_INTERVAL_NS: u64 = 500_000_000;
/// Samples kept per CPU and direction (34 minutes at 500 ms); later ones are counted in
/// [`CpuDetail::samples_dropped`].
pub const MAX_SAMPLES_PER_CPU: usize = 4096;
/// Log windows kept per CPU and direction; later ones are counted in [`CpuDetail::log_windows_dropped`].
pub const MAX_LOG_WINDOWS_PER_CPU: usize = 8192;
/// Buckets of fio's depth, submit and complete distributions (`FIO_IO_U_MAP_NR`).
pub const DEPTH_BUCKETS: usize = 7;

/// What the engine measures beyond its own report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DetailOptions {
    /// Interval of bandwidth/IOPS samples in ns (fio's `bwavgtime`); the engine takes them from its
    /// periodic check, so they are at least this long and at most 100 ms longer.
    pub sample_interval_ns: u64,
    /// Window of the averaged logs in ns (fio's `log_avg_msec`); 0 keeps no log windows.
    pub log_window_ns: u64,
}

impl Default for DetailOptions {
    fn default() -> Self {
        Self {
            sample_interval_ns: DEFAULT_SAMPLE_INTERVAL_NS,
            log_window_ns: 0,
        }
    }
}

/// fio's depth bucket (`io_u_mark_depth`) of `depth` requests in flight, this one included:
/// 1, 2-3, 4-7, 8-15, 16-31, 32-63, 64 and more.
#[inline(always)]
pub const fn depth_bucket(depth: usize) -> usize {
    if depth <= 1 {
        return 0;
    }
    let log2 = (usize::BITS - 1 - depth.leading_zeros()) as usize;
    if log2 < DEPTH_BUCKETS - 1 {
        log2
    } else {
        DEPTH_BUCKETS - 1
    }
}

/// fio's batch bucket (`io_u_mark_complete` / `io_u_mark_submit`) of `count` I/Os handled at once:
/// 0, 1-4, 5-8, 9-16, 17-32, 33-64, more than 64.
#[inline(always)]
pub const fn batch_bucket(count: usize) -> usize {
    match count {
        0 => 0,
        1..=4 => 1,
        5..=8 => 2,
        9..=16 => 3,
        17..=32 => 4,
        33..=64 => 5,
        _ => 6,
    }
}

/// Count, minimum, maximum, sum and sum of squares of a series of integer samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SampleStats {
    /// Number of samples.
    pub samples: u64,
    /// Smallest sample (0 when there is none).
    pub min: u64,
    /// Largest sample.
    pub max: u64,
    /// Sum of the samples.
    pub sum: u128,
    /// Sum of their squares.
    pub sum_of_squares: u128,
}

impl SampleStats {
    /// Statistics of `samples`.
    pub fn of(samples: impl IntoIterator<Item = u64>) -> Self {
        let mut stats = Self::default();
        for value in samples {
            stats.min = if stats.samples == 0 {
                value
            } else {
                stats.min.min(value)
            };
            stats.max = stats.max.max(value);
            stats.samples += 1;
            stats.sum += u128::from(value);
            stats.sum_of_squares = stats
                .sum_of_squares
                .saturating_add(u128::from(value) * u128::from(value));
        }
        stats
    }

    /// The mean in millionths, rounded to nearest.
    pub fn mean_micros(&self) -> u128 {
        ratio_micros(self.sum, u128::from(self.samples))
    }

    /// The sample standard deviation in millionths (fio's `calc_lat`: divided by n - 1).
    pub fn stddev_micros(&self) -> u128 {
        stddev_micros(u128::from(self.samples), self.sum, self.sum_of_squares)
    }
}

/// One interval sample of one direction: bandwidth in KiB/s and IOPS, as fio computes them
/// (bytes and I/Os completed in the interval, per second of the interval, rounded down).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RateSample {
    /// KiB per second.
    pub bw_kib: u64,
    /// I/Os per second.
    pub iops: u64,
}

impl RateSample {
    /// The rates of `bytes` and `ios` completed over `ns` nanoseconds (zeros when `ns` is 0).
    pub fn over(bytes: u64, ios: u64, ns: u64) -> Self {
        if ns == 0 {
            return Self::default();
        }
        let per_second = |count: u64| -> u64 {
            u64::try_from(u128::from(count) * 1_000_000_000 / u128::from(ns)).unwrap_or(u64::MAX)
        };
        Self {
            bw_kib: per_second(bytes) / 1024,
            iops: per_second(ios),
        }
    }
}

/// One averaged log window of one direction (fio's `log_avg_msec` rows).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LogWindow {
    /// End of the window, in ms since the CPU started the job.
    pub time_ms: u64,
    /// Bandwidth and IOPS over the window.
    pub rate: RateSample,
    /// Successful I/Os whose latency the window holds (0: no latency rows for this window).
    pub latency_samples: u64,
    /// Mean submission latency over the window, ns.
    pub slat_mean_ns: u64,
    /// Mean completion latency over the window, ns.
    pub clat_mean_ns: u64,
    /// Mean total latency over the window, ns.
    pub lat_mean_ns: u64,
}

/// Detail of one direction on one CPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirectionDetail {
    /// Submission latency: from just before `submit` to just after it returned.
    pub slat: LatencyHistogram,
    /// Completion latency: from just after `submit` returned to the reap.
    pub clat: LatencyHistogram,
    /// Interval samples, oldest first.
    pub samples: Vec<RateSample>,
    /// Averaged log windows, oldest first (empty without `log_window_ns`).
    pub log: Vec<LogWindow>,
}

impl DirectionDetail {
    fn new(log_capacity: usize) -> Self {
        Self {
            slat: LatencyHistogram::new(),
            clat: LatencyHistogram::new(),
            samples: Vec::with_capacity(MAX_SAMPLES_PER_CPU),
            log: Vec::with_capacity(log_capacity),
        }
    }
}

/// Everything the detail mode measured on one CPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuDetail {
    /// The options it ran with.
    pub options: DetailOptions,
    /// Reads.
    pub read: DirectionDetail,
    /// Writes.
    pub write: DirectionDetail,
    /// Trims (discards).
    pub trim: DirectionDetail,
    /// Submissions by the depth in flight including the new one ([`depth_bucket`]).
    pub depth_at_submit: [u64; DEPTH_BUCKETS],
    /// Completions by how many came back from one reap ([`batch_bucket`], weighted by I/Os).
    pub completions_per_reap: [u64; DEPTH_BUCKETS],
    /// Time the CPU spent in the backend's `idle` during the measured phase, in ns.
    pub idle_ns: u64,
    /// Interval samples that did not fit.
    pub samples_dropped: u64,
    /// Log windows that did not fit.
    pub log_windows_dropped: u64,
}

impl CpuDetail {
    /// Empty detail, with every buffer allocated.
    pub fn new(options: DetailOptions) -> Self {
        let log_capacity = if options.log_window_ns == 0 {
            0
        } else {
            MAX_LOG_WINDOWS_PER_CPU
        };
        Self {
            options,
            read: DirectionDetail::new(log_capacity),
            write: DirectionDetail::new(log_capacity),
            trim: DirectionDetail::new(log_capacity),
            depth_at_submit: [0; DEPTH_BUCKETS],
            completions_per_reap: [0; DEPTH_BUCKETS],
            idle_ns: 0,
            samples_dropped: 0,
            log_windows_dropped: 0,
        }
    }
}

/// Where the previous sample or window ended, to take differences from.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Mark {
    pub(crate) at_ns: u64,
    pub(crate) bytes: [u64; 3],
    pub(crate) ios: [u64; 3],
    /// (samples, slat sum, clat sum, lat sum) per direction.
    pub(crate) latency: [(u64, u128, u128, u128); 3],
}

/// The per-direction totals at one moment, taken by the engine.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Totals {
    pub(crate) bytes: [u64; 3],
    pub(crate) ios: [u64; 3],
    pub(crate) latency: [(u64, u128, u128, u128); 3],
}

impl CpuDetail {
    /// Records one interval sample per direction the job does, ending at `now_ns`.
    pub(crate) fn take_sample(&mut self, mark: &mut Mark, now: &Totals, now_ns: u64, directions: [bool; 3]) {
        let ns = now_ns.saturating_sub(mark.at_ns);
        for (index, detail) in [&mut self.read, &mut self.write, &mut self.trim]
            .into_iter()
            .enumerate()
        {
            if !directions[index] {
                continue;
            }
            let sample = RateSample::over(
                now.bytes[index] - mark.bytes[index],
                now.ios[index] - mark.ios[index],
                ns,
            );
            if detail.samples.len() < detail.samples.capacity() {
                detail.samples.push(sample);
            } else {
                self.samples_dropped += 1;
            }
        }
        mark.at_ns = now_ns;
        mark.bytes = now.bytes;
        mark.ios = now.ios;
    }

    /// Records one log window per direction the job does, ending at `now_ns` (`start_ns`: when the
    /// CPU started the job).
    pub(crate) fn take_window(
        &mut self,
        mark: &mut Mark,
        now: &Totals,
        now_ns: u64,
        start_ns: u64,
        directions: [bool; 3],
    ) {
        let ns = now_ns.saturating_sub(mark.at_ns);
        for (index, detail) in [&mut self.read, &mut self.write, &mut self.trim]
            .into_iter()
            .enumerate()
        {
            if !directions[index] {
                continue;
            }
            let (samples, slat, clat, lat) = now.latency[index];
            let (samples_before, slat_before, clat_before, lat_before) = mark.latency[index];
            let count = samples - samples_before;
            let mean = |sum: u128, before: u128| -> u64 {
                if count == 0 {
                    0
                } else {
                    u64::try_from((sum - before) / u128::from(count)).unwrap_or(u64::MAX)
                }
            };
            let window = LogWindow {
                time_ms: now_ns.saturating_sub(start_ns) / 1_000_000,
                rate: RateSample::over(
                    now.bytes[index] - mark.bytes[index],
                    now.ios[index] - mark.ios[index],
                    ns,
                ),
                latency_samples: count,
                slat_mean_ns: mean(slat, slat_before),
                clat_mean_ns: mean(clat, clat_before),
                lat_mean_ns: mean(lat, lat_before),
            };
            if detail.log.len() < detail.log.capacity() {
                detail.log.push(window);
            } else {
                self.log_windows_dropped += 1;
            }
        }
        mark.at_ns = now_ns;
        mark.bytes = now.bytes;
        mark.ios = now.ios;
        mark.latency = now.latency;
    }
}

/// The detail of a whole job: the CPUs' detail merged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobDetail {
    /// Submission latency of reads.
    pub read_slat: LatencyHistogram,
    /// Completion latency of reads.
    pub read_clat: LatencyHistogram,
    /// Submission latency of writes.
    pub write_slat: LatencyHistogram,
    /// Completion latency of writes.
    pub write_clat: LatencyHistogram,
    /// Job-wide interval samples of reads: the i-th sample of every CPU summed (the CPUs start
    /// together, so the i-th samples cover about the same interval), as fio sums the clones of a
    /// reporting group.
    pub read_samples: Vec<RateSample>,
    /// Job-wide interval samples of writes.
    pub write_samples: Vec<RateSample>,
    /// Submission latency of trims.
    pub trim_slat: LatencyHistogram,
    /// Completion latency of trims.
    pub trim_clat: LatencyHistogram,
    /// Job-wide interval samples of trims.
    pub trim_samples: Vec<RateSample>,
    /// Per-CPU detail, in the plan's CPU order (for the per-CPU logs).
    pub per_cpu: Vec<CpuDetail>,
    /// Depth distribution at submission, all CPUs.
    pub depth_at_submit: [u64; DEPTH_BUCKETS],
    /// Completions per reap, all CPUs.
    pub completions_per_reap: [u64; DEPTH_BUCKETS],
    /// Busy time summed over the CPUs (measured phase minus idle), ns.
    pub busy_ns: u64,
    /// Measured phases summed over the CPUs, ns.
    pub cpu_runtime_ns: u64,
    /// Interval samples that did not fit, all CPUs.
    pub samples_dropped: u64,
    /// Log windows that did not fit, all CPUs.
    pub log_windows_dropped: u64,
}

impl JobDetail {
    /// Merges per-CPU detail; `runtimes_ns` are the CPUs' measured phases, in the same order.
    pub fn merge(per_cpu: Vec<CpuDetail>, runtimes_ns: &[u64]) -> Self {
        let mut job = Self {
            read_slat: LatencyHistogram::new(),
            read_clat: LatencyHistogram::new(),
            write_slat: LatencyHistogram::new(),
            write_clat: LatencyHistogram::new(),
            read_samples: sum_samples(per_cpu.iter().map(|c| c.read.samples.as_slice())),
            write_samples: sum_samples(per_cpu.iter().map(|c| c.write.samples.as_slice())),
            trim_slat: LatencyHistogram::new(),
            trim_clat: LatencyHistogram::new(),
            trim_samples: sum_samples(per_cpu.iter().map(|c| c.trim.samples.as_slice())),
            per_cpu: Vec::new(),
            depth_at_submit: [0; DEPTH_BUCKETS],
            completions_per_reap: [0; DEPTH_BUCKETS],
            busy_ns: 0,
            cpu_runtime_ns: 0,
            samples_dropped: 0,
            log_windows_dropped: 0,
        };
        for (cpu, &runtime_ns) in per_cpu.iter().zip(runtimes_ns) {
            job.read_slat.merge(&cpu.read.slat);
            job.read_clat.merge(&cpu.read.clat);
            job.write_slat.merge(&cpu.write.slat);
            job.write_clat.merge(&cpu.write.clat);
            job.trim_slat.merge(&cpu.trim.slat);
            job.trim_clat.merge(&cpu.trim.clat);
            for bucket in 0..DEPTH_BUCKETS {
                job.depth_at_submit[bucket] += cpu.depth_at_submit[bucket];
                job.completions_per_reap[bucket] += cpu.completions_per_reap[bucket];
            }
            job.busy_ns += runtime_ns.saturating_sub(cpu.idle_ns);
            job.cpu_runtime_ns += runtime_ns;
            job.samples_dropped += cpu.samples_dropped;
            job.log_windows_dropped += cpu.log_windows_dropped;
        }
        job.per_cpu = per_cpu;
        job
    }
}

fn sum_samples<'a>(per_cpu: impl Iterator<Item = &'a [RateSample]>) -> Vec<RateSample> {
    let mut total: Vec<RateSample> = Vec::new();
    for samples in per_cpu {
        if total.len() < samples.len() {
            total.resize(samples.len(), RateSample::default());
        }
        for (sum, sample) in total.iter_mut().zip(samples) {
            sum.bw_kib += sample.bw_kib;
            sum.iops += sample.iops;
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depth_buckets_are_fios() {
        let expected = [
            (1, 0),
            (2, 1),
            (3, 1),
            (4, 2),
            (7, 2),
            (8, 3),
            (15, 3),
            (16, 4),
            (31, 4),
            (32, 5),
        ];
        for (depth, bucket) in expected {
            assert_eq!(depth_bucket(depth), bucket, "depth {depth}");
        }
        assert_eq!((depth_bucket(63), depth_bucket(64), depth_bucket(65_535)), (5, 6, 6));
        assert_eq!(depth_bucket(0), 0);
    }

    #[test]
    fn batch_buckets_are_fios() {
        let expected = [
            (0, 0),
            (1, 1),
            (4, 1),
            (5, 2),
            (8, 2),
            (9, 3),
            (16, 3),
            (17, 4),
            (32, 4),
            (33, 5),
            (64, 5),
            (65, 6),
        ];
        for (count, bucket) in expected {
            assert_eq!(batch_bucket(count), bucket, "count {count}");
        }
    }

    #[test]
    fn sample_stats_match_fios_definitions() {
        let stats = SampleStats::of([10, 20, 30, 40]);
        assert_eq!((stats.samples, stats.min, stats.max), (4, 10, 40));
        assert_eq!(stats.mean_micros(), 25_000_000);
        // Sample stddev of 10, 20, 30, 40: sqrt(500 / 3) = 12.909944...
        assert_eq!(stats.stddev_micros(), 12_909_944);
        assert_eq!(SampleStats::of([]).mean_micros(), 0);
        assert_eq!(SampleStats::of([7]).stddev_micros(), 0);
    }

    #[test]
    fn rates_are_per_second_of_the_interval() {
        // 1 MiB and 256 I/Os in 500 ms: 2048 KiB/s, 512 IOPS.
        assert_eq!(
            RateSample::over(1 << 20, 256, 500_000_000),
            RateSample {
                bw_kib: 2048,
                iops: 512
            }
        );
        assert_eq!(RateSample::over(5, 5, 0), RateSample::default());
    }

    #[test]
    fn job_samples_sum_the_cpus_index_by_index() {
        let mut a = CpuDetail::new(DetailOptions::default());
        let mut b = CpuDetail::new(DetailOptions::default());
        a.read
            .samples
            .extend([RateSample { bw_kib: 1, iops: 2 }, RateSample { bw_kib: 3, iops: 4 }]);
        b.read.samples.push(RateSample { bw_kib: 10, iops: 20 });
        a.idle_ns = 100;
        b.idle_ns = 300;
        a.depth_at_submit[2] = 5;
        b.depth_at_submit[2] = 6;
        let job = JobDetail::merge(alloc::vec![a, b], &[1000, 1000]);
        assert_eq!(
            job.read_samples,
            [RateSample { bw_kib: 11, iops: 22 }, RateSample { bw_kib: 3, iops: 4 }]
        );
        assert!(job.write_samples.is_empty());
        assert_eq!((job.busy_ns, job.cpu_runtime_ns), (1600, 2000));
        assert_eq!(job.depth_at_submit[2], 11);
    }

    #[test]
    fn windows_average_the_latency_of_their_own_ios() {
        let mut detail = CpuDetail::new(DetailOptions {
            log_window_ns: 1_000_000_000,
            ..DetailOptions::default()
        });
        let mut mark = Mark {
            at_ns: 5_000,
            ..Mark::default()
        };
        let first = Totals {
            bytes: [4096 * 10, 0, 0],
            ios: [10, 0, 0],
            latency: [(10, 1_000, 10_000, 11_000), (0, 0, 0, 0), (0, 0, 0, 0)],
        };
        detail.take_window(&mut mark, &first, 1_000_005_000, 5_000, [true, false, false]);
        let second = Totals {
            bytes: [4096 * 30, 0, 0],
            ios: [30, 0, 0],
            latency: [
                (30, 1_000 + 20 * 300, 10_000 + 20 * 3000, 11_000 + 20 * 3300),
                (0, 0, 0, 0),
                (0, 0, 0, 0),
            ],
        };
        detail.take_window(&mut mark, &second, 2_000_005_000, 5_000, [true, false, false]);
        assert!(detail.write.log.is_empty());
        let rows = &detail.read.log;
        assert_eq!(rows.len(), 2);
        assert_eq!(
            (rows[0].time_ms, rows[0].rate.iops, rows[0].rate.bw_kib),
            (1000, 10, 40)
        );
        assert_eq!(
            (rows[0].slat_mean_ns, rows[0].clat_mean_ns, rows[0].lat_mean_ns),
            (100, 1000, 1100)
        );
        assert_eq!((rows[1].time_ms, rows[1].rate.iops), (2000, 20));
        assert_eq!(
            (rows[1].slat_mean_ns, rows[1].clat_mean_ns, rows[1].lat_mean_ns),
            (300, 3000, 3300)
        );
        assert_eq!(rows[1].latency_samples, 20);
    }
}
