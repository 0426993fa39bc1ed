//! fio's steady-state detection (`ss`, `ss_dur`, `ss_ramp`): once a second a job's IOPS and
//! bandwidth over the last second are recorded in a window of `ss_dur` seconds; once the window is
//! full, the job stops as soon as the window meets the criterion, which is either
//!
//! - a *mean deviation* (`iops`, `bw`): the largest distance of a sample from the window's mean is
//!   below the limit (an absolute figure, or with `%` a percentage of the mean), or
//! - a *slope* (`iops_slope`, `bw_slope`): the least-squares slope of the samples against their
//!   second (0, 1, ...) is below the limit in magnitude (absolute, or with `%` a percentage of the
//!   mean).
//!
//! The arithmetic is fio's (3.33, `steadystate.c`): integer rates `1000 * delta / elapsed_ms`,
//! running sums of the window, samples taken as one second apart, and the same ring of samples,
//! so the JSON `steadystate` object ([`SteadyOutcome`]) lists them in fio's order.

use alloc::vec;
use alloc::vec::Vec;
use core::fmt;

/// What the window is judged on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SteadyMetric {
    /// I/Os per second.
    Iops,
    /// Bytes per second.
    Bandwidth,
}

/// How the window is judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SteadyTest {
    /// The largest distance of a sample from the mean.
    Deviation,
    /// The least-squares slope.
    Slope,
}

/// A job's steady-state criterion (fio's `ss=METRIC[_slope]:LIMIT[%]`, `ss_dur`, `ss_ramp`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SteadyState {
    /// IOPS or bandwidth.
    pub metric: SteadyMetric,
    /// Mean deviation or slope.
    pub test: SteadyTest,
    /// The limit the criterion must be below: IOPS, bytes per second, or a percentage.
    pub limit: f64,
    /// Whether `limit` is a percentage of the window's mean.
    pub percent: bool,
    /// The window, in one-second samples (at least 1).
    pub duration_s: u32,
    /// How long after the job's start recording begins (fio starts one second after it).
    pub ramp_ns: u64,
    /// Whether the job's clones are judged on their summed rates (fio's reporting group, with
    /// `group_reporting`) rather than each on its own.
    pub summed: bool,
}

/// The limit is never NaN (the fio front-end takes only finite, non-negative numbers), so
/// equality is an equivalence.
impl Eq for SteadyState {}

impl Default for SteadyState {
    /// fio's default criterion, `iops_slope:0.01%`, with no window yet.
    fn default() -> Self {
        Self {
            metric: SteadyMetric::Iops,
            test: SteadyTest::Slope,
            limit: 0.01,
            percent: true,
            duration_s: 0,
            ramp_ns: 0,
            summed: false,
        }
    }
}

impl SteadyState {
    /// fio's spelling of the criterion, as its JSON `ss` field prints it: `iops_slope:0.010000%`.
    pub fn spelling(&self) -> SteadySpelling<'_> {
        SteadySpelling(self)
    }
}

/// See [`SteadyState::spelling`].
#[derive(Debug, Clone, Copy)]
pub struct SteadySpelling<'a>(&'a SteadyState);

impl fmt::Display for SteadySpelling<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.0;
        let metric = match s.metric {
            SteadyMetric::Iops => "iops",
            SteadyMetric::Bandwidth => "bw",
        };
        let slope = if s.test == SteadyTest::Slope { "_slope" } else { "" };
        // fio prints the limit as a C float with `%f`.
        write!(
            f,
            "{metric}{slope}:{:.6}{}",
            s.limit as f32,
            if s.percent { "%" } else { "" }
        )
    }
}

/// Interval between samples, as fio's helper thread takes them.
pub const SAMPLE_INTERVAL_NS: u64 = 1_000_000_000;

/// One job's (or clone's) steady-state window while it runs.
#[derive(Debug, Clone)]
pub struct SteadyTracker {
    state: SteadyState,
    iops: Vec<u64>,
    bw: Vec<u64>,
    head: usize,
    tail: usize,
    full: bool,
    attained: bool,
    ramp_over: bool,
    sum_y: u64,
    sum_xy: u64,
    sum_x: u64,
    sum_x_sq: u64,
    oldest_y: u64,
    slope: f64,
    deviation: f64,
    criterion: f64,
    start_ns: u64,
    prev_ns: u64,
    prev_ios: u64,
    prev_bytes: u64,
    next_ns: u64,
}

impl SteadyTracker {
    /// A tracker for a job that started at `start_ns` (its counters then at zero).
    pub fn new(state: SteadyState, start_ns: u64) -> Self {
        let n = u64::from(state.duration_s.max(1));
        Self {
            state,
            iops: vec![0; n as usize],
            bw: vec![0; n as usize],
            head: 0,
            tail: 0,
            full: false,
            attained: false,
            ramp_over: state.ramp_ns == 0,
            sum_y: 0,
            sum_xy: 0,
            sum_x: n * (n - 1) / 2,
            sum_x_sq: (n - 1) * n * (2 * n - 1) / 6,
            oldest_y: 0,
            slope: 0.0,
            deviation: 0.0,
            criterion: 0.0,
            start_ns,
            prev_ns: start_ns,
            prev_ios: 0,
            prev_bytes: 0,
            next_ns: start_ns.saturating_add(SAMPLE_INTERVAL_NS),
        }
    }

    /// Whether a sample is due at `now` (cheap: for the engine's periodic check).
    #[inline]
    pub fn due(&self, now_ns: u64) -> bool {
        !self.attained && now_ns >= self.next_ns
    }

    /// Takes the sample due at `now_ns` from the job's completed I/Os and bytes so far; returns
    /// whether the job has reached steady state (and should stop).
    pub fn sample(&mut self, now_ns: u64, ios: u64, bytes: u64) -> bool {
        if self.attained {
            return true;
        }
        self.next_ns = now_ns.saturating_add(SAMPLE_INTERVAL_NS);
        if !self.ramp_over
            && now_ns.saturating_sub(self.start_ns) >= self.state.ramp_ns.saturating_add(SAMPLE_INTERVAL_NS)
        {
            self.ramp_over = true;
        }
        // fio divides by whole milliseconds; a sample less than 1 ms after the last is no rate.
        let elapsed_ms = now_ns.saturating_sub(self.prev_ns) / 1_000_000;
        let rates = (self.ramp_over && elapsed_ms > 0).then(|| {
            (
                ios.saturating_sub(self.prev_ios).saturating_mul(1000) / elapsed_ms,
                bytes.saturating_sub(self.prev_bytes).saturating_mul(1000) / elapsed_ms,
            )
        });
        self.prev_ns = now_ns;
        self.prev_ios = ios;
        self.prev_bytes = bytes;
        let Some((iops, bw)) = rates else {
            return false;
        };
        self.record(iops, bw)
    }

    fn value(&self, i: usize) -> u64 {
        match self.state.metric {
            SteadyMetric::Iops => self.iops[i],
            SteadyMetric::Bandwidth => self.bw[i],
        }
    }

    /// Adds one second's rates to the window and judges it; true once it met the criterion.
    pub fn record(&mut self, iops: u64, bw: u64) -> bool {
        let n = self.iops.len();
        self.iops[self.tail] = iops;
        self.bw[self.tail] = bw;
        let new_val = self.value(self.tail);
        if self.full || self.tail.wrapping_sub(self.head) == n - 1 {
            if !self.full {
                self.sum_y = (0..n).map(|i| self.value(i)).sum();
                self.sum_xy = (0..n).map(|i| i as u64 * self.value((self.head + i) % n)).sum();
                self.full = true;
            } else {
                self.sum_y = self.sum_y.wrapping_sub(self.oldest_y).wrapping_add(new_val);
                self.sum_xy = self
                    .sum_xy
                    .wrapping_sub(self.sum_y)
                    .wrapping_add((n as u64).wrapping_mul(new_val));
            }
            self.oldest_y = self.value(self.head);
            let dur = n as f64;
            let mean = self.sum_y as f64 / dur;
            let met = match self.state.test {
                SteadyTest::Slope => {
                    let denominator = self.sum_x_sq as f64 - self.sum_x as f64 * self.sum_x as f64 / dur;
                    self.slope = (self.sum_xy as f64 - self.sum_x as f64 * self.sum_y as f64 / dur) / denominator;
                    self.criterion = if self.state.percent {
                        100.0 * self.slope / mean
                    } else {
                        self.slope
                    };
                    // A window of one second has no slope (0/0): never steady, as in fio.
                    abs(self.criterion) < self.state.limit
                }
                SteadyTest::Deviation => {
                    self.deviation = (0..n).map(|i| abs(self.value(i) as f64 - mean)).fold(0.0, f64::max);
                    self.criterion = if self.state.percent {
                        100.0 * self.deviation / mean
                    } else {
                        self.deviation
                    };
                    self.criterion < self.state.limit
                }
            };
            if met {
                self.attained = true;
                return true;
            }
        }
        self.tail = (self.tail + 1) % n;
        if self.tail <= self.head {
            self.head = (self.head + 1) % n;
        }
        false
    }

    /// What the job's report says about it.
    pub fn outcome(&self) -> SteadyOutcome {
        let n = self.iops.len();
        // fio: when attained or not full, `head` is the oldest sample; otherwise the one before.
        let first = if self.attained || !self.full {
            self.head
        } else if self.head == 0 {
            n - 1
        } else {
            self.head - 1
        };
        let order = |data: &[u64]| (0..n).map(|l| data[(first + l) % n]).collect::<Vec<u64>>();
        SteadyOutcome {
            state: self.state,
            attained: self.attained,
            criterion: self.criterion,
            max_deviation: self.deviation,
            slope: self.slope,
            iops: order(&self.iops),
            bw: order(&self.bw),
        }
    }
}

fn abs(x: f64) -> f64 {
    if x < 0.0 { -x } else { x }
}

/// fio's `steadystate` object of a job's report. Compared bit for bit (a one-second slope window
/// leaves a NaN criterion, as fio's does), so equality is an equivalence.
#[derive(Debug, Clone)]
pub struct SteadyOutcome {
    /// The criterion the window was judged on.
    pub state: SteadyState,
    /// Whether the job stopped because it reached steady state.
    pub attained: bool,
    /// The last criterion computed (a percentage where the limit is one).
    pub criterion: f64,
    /// The last mean deviation computed (deviation criteria only; 0 otherwise).
    pub max_deviation: f64,
    /// The last slope computed (slope criteria only; 0 otherwise).
    pub slope: f64,
    /// The window's IOPS samples, oldest first.
    pub iops: Vec<u64>,
    /// The window's bandwidth samples (bytes per second), oldest first.
    pub bw: Vec<u64>,
}

impl PartialEq for SteadyOutcome {
    fn eq(&self, other: &Self) -> bool {
        self.state == other.state
            && self.attained == other.attained
            && self.criterion.to_bits() == other.criterion.to_bits()
            && self.max_deviation.to_bits() == other.max_deviation.to_bits()
            && self.slope.to_bits() == other.slope.to_bits()
            && self.iops == other.iops
            && self.bw == other.bw
    }
}

impl Eq for SteadyOutcome {}

impl SteadyOutcome {
    /// fio's `iops_mean`: the integer mean of the window.
    pub fn iops_mean(&self) -> u64 {
        mean(&self.iops)
    }

    /// fio's `bw_mean`.
    pub fn bw_mean(&self) -> u64 {
        mean(&self.bw)
    }
}

fn mean(data: &[u64]) -> u64 {
    if data.is_empty() {
        0
    } else {
        data.iter().sum::<u64>() / data.len() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(metric: SteadyMetric, test: SteadyTest, limit: f64, percent: bool, dur: u32) -> SteadyState {
        SteadyState {
            metric,
            test,
            limit,
            percent,
            duration_s: dur,
            ramp_ns: 0,
            summed: false,
        }
    }

    /// Nothing is judged before the window is full; a flat window meets a deviation criterion.
    #[test]
    fn a_deviation_criterion_waits_for_a_full_window() {
        let mut t = SteadyTracker::new(state(SteadyMetric::Iops, SteadyTest::Deviation, 10.0, true, 3), 0);
        assert!(!t.record(1000, 4_096_000));
        assert!(!t.record(1050, 4_300_800));
        // Mean 1016.7, farthest 33.3 away: 3.3% < 10%.
        assert!(t.record(1000, 4_096_000));
        let o = t.outcome();
        assert!(o.attained);
        assert_eq!(o.iops, [1000, 1050, 1000]);
        assert_eq!(o.iops_mean(), 1016);
        assert!((o.max_deviation - 33.333).abs() < 0.01, "{}", o.max_deviation);
        assert!((o.criterion - 3.2787).abs() < 0.001, "{}", o.criterion);
    }

    /// A window that still moves does not; the ring slides and keeps its sums right.
    #[test]
    fn a_rising_rate_fails_until_it_settles() {
        let mut t = SteadyTracker::new(state(SteadyMetric::Iops, SteadyTest::Deviation, 5.0, true, 3), 0);
        for v in [100, 200, 300, 400] {
            assert!(!t.record(v, 0), "{v}");
        }
        // Window now 300, 400, 500 -> 400, 500, 500 -> 500, 500, 500.
        assert!(!t.record(500, 0));
        assert!(!t.record(500, 0));
        assert!(t.record(500, 0));
        assert_eq!(t.outcome().iops, [500, 500, 500]);
    }

    /// The slope is the least-squares slope of the samples, as a percentage of their mean; the
    /// running sums agree with the sums recomputed from the window after it slides.
    #[test]
    fn the_slope_is_least_squares_over_the_window() {
        let mut t = SteadyTracker::new(state(SteadyMetric::Bandwidth, SteadyTest::Slope, 1.0, true, 4), 0);
        // 100, 110, 120, 130: slope 10 per second, mean 115: 8.7%.
        for v in [100, 110, 120] {
            assert!(!t.record(0, v));
        }
        assert!(!t.record(0, 130));
        assert!((t.slope - 10.0).abs() < 1e-9, "{}", t.slope);
        assert!((t.criterion - 100.0 * 10.0 / 115.0).abs() < 1e-9);
        // Then flat: 110, 120, 130, 130 (slope 6.6), ..., 130 x4 (slope 0).
        let mut met = false;
        for _ in 0..4 {
            met = t.record(0, 130);
            if met {
                break;
            }
        }
        assert!(met);
        assert_eq!(t.outcome().bw, [130, 130, 130, 130]);
        assert_eq!(t.slope, 0.0);
    }

    /// Absolute limits: IOPS for `iops`, bytes per second for `bw`.
    #[test]
    fn absolute_limits_compare_the_raw_figure() {
        let mut t = SteadyTracker::new(state(SteadyMetric::Iops, SteadyTest::Deviation, 20.0, false, 2), 0);
        assert!(!t.record(1000, 0));
        // Mean 1015, deviation 15 < 20.
        assert!(t.record(1030, 0));
        let mut t = SteadyTracker::new(state(SteadyMetric::Iops, SteadyTest::Deviation, 10.0, false, 2), 0);
        t.record(1000, 0);
        assert!(!t.record(1030, 0));
    }

    /// Samples come from the job's counters once a second: integer rates over whole
    /// milliseconds, nothing recorded until one second after the ramp.
    #[test]
    fn samples_turn_counters_into_rates_after_the_ramp() {
        let mut s = state(SteadyMetric::Iops, SteadyTest::Deviation, 1.0, true, 2);
        s.ramp_ns = 2 * SAMPLE_INTERVAL_NS;
        let mut t = SteadyTracker::new(s, 10);
        assert!(!t.due(10 + SAMPLE_INTERVAL_NS - 1));
        assert!(t.due(10 + SAMPLE_INTERVAL_NS));
        // Before the ramp (and its extra second) is over, counters only move the baseline.
        assert!(!t.sample(10 + SAMPLE_INTERVAL_NS, 999, 0));
        assert!(!t.sample(10 + 2 * SAMPLE_INTERVAL_NS, 5000, 0));
        assert_eq!(t.outcome().iops, [0, 0]);
        // 3 s in: 3000 I/Os in 1000 ms.
        assert!(!t.sample(10 + 3 * SAMPLE_INTERVAL_NS, 8000, 0));
        // 4 s in, 1.5 s later: 3000 I/Os in 1500 ms = 2000 IOPS: 20% apart, not steady.
        assert!(!t.sample(10 + 4 * SAMPLE_INTERVAL_NS + 500_000_000, 11000, 0));
        assert_eq!(t.outcome().iops, [3000, 2000]);
        assert!(!t.due(10 + 5 * SAMPLE_INTERVAL_NS));
        assert!(t.due(10 + 5 * SAMPLE_INTERVAL_NS + 500_000_000));
    }

    /// fio's order of the samples in the report: oldest first, whether the window is full,
    /// attained or not.
    #[test]
    fn the_report_lists_the_window_oldest_first() {
        let mut t = SteadyTracker::new(state(SteadyMetric::Iops, SteadyTest::Deviation, 0.001, true, 3), 0);
        t.record(1, 0);
        t.record(2, 0);
        assert_eq!(t.outcome().iops, [1, 2, 0]);
        t.record(3, 0);
        t.record(4, 0);
        t.record(5, 0);
        assert_eq!(t.outcome().iops, [3, 4, 5]);
    }

    #[test]
    fn the_spelling_is_fios() {
        let s = SteadyState::default();
        assert_eq!(alloc::format!("{}", s.spelling()), "iops_slope:0.010000%");
        let s = state(SteadyMetric::Bandwidth, SteadyTest::Deviation, 1_048_576.0, false, 5);
        assert_eq!(alloc::format!("{}", s.spelling()), "bw:1048576.000000");
    }
}
