//! Steady state on one CPU (`crate::steady`): the clone's own window, or with `summed` the
//! job's, judged by its first CPU from every CPU's published counters. Looked at only in the
//! periodic check (about every 100 ms), never per I/O.

use super::{CpuRun, IoBackend};
use crate::steady::{SteadyOutcome, SteadyTracker};
use alloc::boxed::Box;

/// One CPU's part in a job's steady state.
#[derive(Debug)]
pub(super) struct SteadyJudge {
    tracker: SteadyTracker,
    /// Whether this CPU's samples count: every CPU for its own window, only the job's first CPU
    /// for the job's summed window.
    judges: bool,
    summed: bool,
}

impl<B: IoBackend + ?Sized, const PLAIN: bool> CpuRun<'_, B, PLAIN> {
    /// Starts the job's steady-state window, if it has one, at `start_ns`.
    pub(super) fn start_steady(&mut self, cpu_index: usize, start_ns: u64) {
        self.steady = self.plan.spec.steady.map(|state| {
            Box::new(SteadyJudge {
                tracker: SteadyTracker::new(state, start_ns),
                judges: !state.summed || cpu_index == 0,
                summed: state.summed,
            })
        });
    }

    /// Whether the job has reached steady state at `now` (and this CPU should stop issuing).
    pub(super) fn steady_reached(&mut self, now: u64) -> bool {
        let own = self.live_counts();
        let Some(judge) = self.steady.as_deref_mut() else {
            return false;
        };
        if judge.summed && self.shared.steady_attained() {
            return true;
        }
        if !judge.judges || !judge.tracker.due(now) {
            return false;
        }
        let counts = if judge.summed {
            // Every CPU publishes at its periodic check: the others' figures are at most that
            // old, which a one-second rate absorbs.
            self.shared.total()
        } else {
            own
        };
        let reached = judge.tracker.sample(now, counts.ios, counts.bytes);
        if reached && judge.summed {
            self.shared.set_steady_attained();
        }
        reached
    }

    /// The window for the report: the clone's own, or the job's on its first CPU.
    pub(super) fn steady_outcome(&self) -> Option<SteadyOutcome> {
        self.steady
            .as_deref()
            .filter(|judge| judge.judges)
            .map(|judge| judge.tracker.outcome())
    }
}
