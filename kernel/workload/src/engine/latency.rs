//! fio's latency target (`latency_target`, `latency_window`, `latency_percentile`,
//! `latency_run`): the queue-depth search of fio 3.33 (`io_u.c`). A clone starts at depth 1;
//! each window in which enough I/Os (the percentile) finished within the target doubles the depth
//! (or bisects towards the last depth that failed); a window that misses, or with a 100%
//! percentile any one I/O over the target, bisects down. Once a success would leave the depth
//! where it is, the search is over: the statistics start afresh and one more window runs at that
//! depth (what the report measures), then the clone stops, unless `latency_run` keeps searching.
//! An I/O over the target at depth 1 with a 100% percentile ends the job with an error, as fio's
//! "max latency exceeded".

use super::{CpuRun, IoBackend};
use crate::error::WorkloadError;
use crate::job::LatencyTarget;

/// What a step of the search asks of the clone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Nothing changes.
    Stay,
    /// The depth went down: issue nothing until what is in flight has completed.
    Quiesce,
    /// The search settled: drain, restart the statistics and run one more window at this depth.
    FinalWindow,
    /// The final window is over: the clone stops.
    Done,
    /// An I/O over the target at depth 1 with a 100% percentile.
    Missed,
}

/// One clone's search (fio's `latency_qd`, `_low`, `_high`, the window and its failures).
#[derive(Debug, Clone)]
pub(crate) struct DepthSearch {
    target: LatencyTarget,
    iodepth: u32,
    pub(crate) qd: u32,
    low: u32,
    high: u32,
    stable: u32,
    window_start_ns: u64,
    window_ios: u64,
    failed: u64,
    final_window: bool,
}

impl DepthSearch {
    pub(crate) fn new(target: LatencyTarget, iodepth: u32, now_ns: u64, ios: u64) -> Self {
        Self {
            target,
            iodepth: iodepth.max(1),
            qd: 1,
            low: 1,
            high: iodepth.max(1),
            stable: 0,
            window_start_ns: now_ns,
            window_ios: ios,
            failed: 0,
            final_window: false,
        }
    }

    fn new_window(&mut self, now_ns: u64, ios: u64) {
        self.window_start_ns = now_ns;
        self.window_ios = ios;
        self.failed = 0;
    }

    /// A read or write of the measured phase took `latency_ns`; `ios` completed so far.
    pub(crate) fn on_latency(&mut self, latency_ns: u64, now_ns: u64, ios: u64) -> Step {
        if latency_ns <= self.target.target_ns {
            return Step::Stay;
        }
        if self.target.percentile_millionths < 100_000_000 {
            self.failed += 1;
            return Step::Stay;
        }
        self.ramp_down(now_ns, ios)
    }

    fn ramp_down(&mut self, now_ns: u64, ios: u64) -> Step {
        if self.qd == 1 {
            return Step::Missed;
        }
        self.high = self.qd;
        if self.qd == self.low {
            self.low -= 1;
        }
        self.qd = (self.qd + self.low) / 2;
        self.stable = 0;
        self.new_window(now_ns, ios);
        Step::Quiesce
    }

    /// The window check fio makes on every pass of its loop: once the window has run, judge it.
    pub(crate) fn check(&mut self, now_ns: u64, ios: u64) -> Step {
        if now_ns.saturating_sub(self.window_start_ns) < self.target.window_ns {
            return Step::Stay;
        }
        let done = ios.saturating_sub(self.window_ios);
        // fio divides as doubles: a window with no I/O is 0/0, not a success.
        let success = done > 0
            && u128::from(done - self.failed.min(done)) * 100_000_000
                >= u128::from(self.target.percentile_millionths) * u128::from(done);
        if !success {
            return match self.ramp_down(now_ns, ios) {
                // fio's check ignores the "give up" answer at depth 1, and keeps the window
                // growing until it succeeds.
                Step::Missed => Step::Stay,
                step => step,
            };
        }
        let before = self.qd;
        self.low = self.qd;
        if self.qd + 1 == self.high {
            self.stable += 1;
            if self.stable >= 3 {
                self.high += 1;
                self.stable = 0;
            }
        }
        self.qd = if self.high != self.iodepth {
            (self.qd + self.high) / 2
        } else {
            self.qd * 2
        }
        .min(self.iodepth);
        let step = if !self.target.keep_searching && self.qd == before {
            if self.final_window {
                Step::Done
            } else {
                self.final_window = true;
                Step::FinalWindow
            }
        } else {
            Step::Stay
        };
        self.new_window(now_ns, ios);
        step
    }
}

impl<B: IoBackend + ?Sized, const PLAIN: bool> CpuRun<'_, B, PLAIN> {
    /// Starts the job's depth search, if it has a latency target.
    pub(super) fn start_latency_target(&mut self, now_ns: u64) {
        self.latency_search = self
            .plan
            .spec
            .latency_target
            .map(|target| alloc::boxed::Box::new(DepthSearch::new(target, self.plan.iodepth, now_ns, 0)));
    }

    /// Whether the depth search lets another I/O go out now: below the search's depth, and after
    /// a ramp down or before the final window only once what was in flight has completed (then,
    /// before the final window, the statistics start afresh).
    pub(super) fn depth_allows(&mut self, now: u64) -> bool {
        let Some(qd) = self.latency_search.as_deref().map(|search| search.qd as usize) else {
            return true;
        };
        if self.quiescing {
            if self.in_flight > 0 {
                return false;
            }
            self.quiescing = false;
            if self.restart_stats_when_drained {
                self.restart_stats_when_drained = false;
                self.end_ramp(now);
            }
        }
        self.in_flight < qd
    }

    /// The window check, at the engine's periodic check; true once the clone is done.
    pub(super) fn latency_target_done(&mut self, now: u64) -> Result<bool, WorkloadError> {
        let ios = self.live_counts().ios;
        let Some(search) = self.latency_search.as_deref_mut() else {
            return Ok(false);
        };
        let step = search.check(now, ios);
        self.apply_depth_step(step, 0)
    }

    /// A measured read or write took `latency_ns`.
    pub(super) fn latency_target_sample(&mut self, latency_ns: u64, now: u64) -> Result<(), WorkloadError> {
        if self.quiescing {
            // Issued at the depth the search just left: fio quiesces so that they do not ramp
            // it down again ("a storm of ramp downs").
            return Ok(());
        }
        let ios = self.live_counts().ios;
        let Some(search) = self.latency_search.as_deref_mut() else {
            return Ok(());
        };
        let step = search.on_latency(latency_ns, now, ios);
        if step != Step::Stay {
            self.apply_depth_step(step, latency_ns)?;
        }
        Ok(())
    }

    /// The depth the search ended at (or stood at when the clone stopped).
    pub(super) fn latency_depth(&self) -> Option<u32> {
        self.latency_search.as_deref().map(|search| search.qd)
    }

    /// Applies a step of the search; Err when the target was missed at depth 1. Returns whether
    /// the clone is done.
    pub(super) fn apply_depth_step(&mut self, step: Step, latency_ns: u64) -> Result<bool, WorkloadError> {
        match step {
            Step::Stay => {}
            Step::Quiesce => self.quiescing = true,
            Step::FinalWindow => {
                self.quiescing = true;
                self.restart_stats_when_drained = true;
            }
            Step::Done => return Ok(true),
            Step::Missed => {
                return Err(WorkloadError::LatencyTargetMissed {
                    cpu: self.slice.cpu,
                    latency_ns,
                    target_ns: self.latency_search.as_deref().map_or(0, |s| s.target.target_ns),
                });
            }
        }
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;
    use alloc::vec::Vec;

    const MS: u64 = 1_000_000;

    fn target(percentile: u32, keep: bool) -> LatencyTarget {
        LatencyTarget {
            target_ns: 500_000,
            window_ns: 100 * MS,
            percentile_millionths: percentile,
            keep_searching: keep,
        }
    }

    /// fio's search on a device whose latency is 100 us per request queued: depths 1, 2, 4
    /// succeed, 8 and 6 miss 500 us, and bisecting settles at 5 (the deepest within target,
    /// 500 us), then a final window, then done.
    #[test]
    fn the_search_doubles_then_bisects_to_the_deepest_depth_within_target() {
        let mut s = DepthSearch::new(target(100_000_000, false), 32, 0, 0);
        let mut now = 0;
        let mut ios = 0;
        let mut depths = vec![s.qd];
        let mut steps = Vec::new();
        for _ in 0..40 {
            // One window at this depth: every I/O takes qd x 100 us.
            let latency = u64::from(s.qd) * 100_000;
            ios += 100;
            now += 100 * MS;
            let mut step = s.on_latency(latency, now, ios);
            if step == Step::Stay {
                step = s.check(now, ios);
            }
            steps.push(step);
            depths.push(s.qd);
            if step == Step::Done {
                break;
            }
        }
        assert_eq!(*steps.last().unwrap(), Step::Done, "{depths:?}");
        assert_eq!(s.qd, 5, "{depths:?} {steps:?}");
        assert!(steps.contains(&Step::FinalWindow));
        assert_eq!(&depths[..5], [1, 2, 4, 8, 6], "{depths:?}");
    }

    /// With a percentile below 100, single slow I/Os only count; the window decides.
    #[test]
    fn below_100_percent_the_window_decides() {
        let mut s = DepthSearch::new(target(90_000_000, false), 8, 0, 0);
        // 5 of 100 over target: 95% within, success at 90%: depth 1 -> 2.
        for _ in 0..5 {
            assert_eq!(s.on_latency(900_000, 10, 0), Step::Stay);
        }
        assert_eq!(s.check(100 * MS, 100), Step::Stay);
        assert_eq!(s.qd, 2);
        // 20 of 100 over: 80% < 90%: back down.
        for _ in 0..20 {
            s.on_latency(900_000, 150 * MS, 100);
        }
        assert_eq!(s.check(200 * MS, 200), Step::Quiesce);
        assert_eq!(s.qd, 1);
    }

    /// An I/O over the target at depth 1 with a 100% percentile gives up; a window check at
    /// depth 1 that fails tries again; a window with no I/O is not a success.
    #[test]
    fn depth_one_misses_end_the_job_and_empty_windows_fail() {
        let mut s = DepthSearch::new(target(100_000_000, false), 8, 0, 0);
        assert_eq!(s.on_latency(600_000, 1, 1), Step::Missed);
        let mut s = DepthSearch::new(target(90_000_000, false), 8, 0, 0);
        assert_eq!(s.check(100 * MS, 0), Step::Stay);
        assert_eq!(s.qd, 1, "an empty window does not ramp up");
        // The window goes on growing from 0 (fio starts no new one at depth 1).
        assert_eq!(s.check(150 * MS, 10), Step::Stay);
        assert_eq!(s.qd, 2);
    }

    /// `latency_run` keeps searching: the search never ends by itself.
    #[test]
    fn latency_run_never_settles() {
        let mut s = DepthSearch::new(target(100_000_000, true), 2, 0, 0);
        for round in 1..20u64 {
            assert_eq!(s.check(round * 100 * MS, round * 100), Step::Stay);
        }
        assert_eq!(s.qd, 2);
    }
}
