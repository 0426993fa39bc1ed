//! fio's steady state: `steadystate` (`ss`), `steadystate_duration` (`ss_dur`) and
//! `steadystate_ramp_time` (`ss_ramp`). A job with a duration stops once its window of one-second
//! IOPS or bandwidth samples meets the criterion (`crate::steady`); without one, the criterion
//! changes nothing (fio's rule).

use super::values;
use super::{Builder, Setting};
use crate::error::WorkloadError;
use crate::steady::{SteadyMetric, SteadyState, SteadyTest};

/// A bare number of `ss_dur` and `ss_ramp` counts seconds.
const SECONDS: u64 = 1_000_000_000;

/// The longest window: fio keeps one sample per second of it in memory, and so does each CPU.
const MAX_WINDOW_S: u64 = 86_400;

impl Builder {
    /// The steady-state options; `Ok(false)`: not one of them.
    pub(super) fn apply_steady(&mut self, s: &Setting<'_>) -> Result<bool, WorkloadError> {
        let mut state = self.spec.steady.unwrap_or_default();
        match s.key {
            "steadystate" | "ss" => {
                let (metric, test, limit, percent) = criterion(s)?;
                state.metric = metric;
                state.test = test;
                state.limit = limit;
                state.percent = percent;
            }
            "steadystate_duration" | "ss_dur" => {
                let ns = s.time(SECONDS)?;
                // fio keeps whole seconds of it.
                let seconds = ns / SECONDS;
                if seconds > MAX_WINDOW_S {
                    return Err(s.bad("a window of at most a day (86400 one-second samples)"));
                }
                state.duration_s = seconds as u32;
            }
            "steadystate_ramp_time" | "ss_ramp" => state.ramp_ns = s.time(SECONDS)?,
            _ => return Ok(false),
        }
        self.spec.steady = Some(state);
        Ok(true)
    }

    /// Once every option is in: no window, no steady state; with `group_reporting`, the job's
    /// clones are judged together, as fio judges a reporting group.
    pub(super) fn settle_steady(&mut self) {
        self.spec.steady = self.spec.steady.filter(|s| s.duration_s > 0).map(|s| SteadyState {
            summed: self.report.group_reporting,
            ..s
        });
    }
}

/// `METRIC:LIMIT[%]` with METRIC `iops`, `iops_slope`, `bw` or `bw_slope`: the limit is a
/// percentage of the window's mean with `%`, else IOPS, or bytes per second (fio's sizes) for `bw`.
fn criterion(s: &Setting<'_>) -> Result<(SteadyMetric, SteadyTest, f64, bool), WorkloadError> {
    const FORM: &str = "iops|iops_slope|bw|bw_slope, a colon and a limit (e.g. iops_slope:0.1% or bw:10m)";
    let (name, limit) = s.need()?.split_once(':').ok_or_else(|| s.bad(FORM))?;
    let (metric, test) = match name.trim() {
        "iops" => (SteadyMetric::Iops, SteadyTest::Deviation),
        "iops_slope" => (SteadyMetric::Iops, SteadyTest::Slope),
        "bw" => (SteadyMetric::Bandwidth, SteadyTest::Deviation),
        "bw_slope" => (SteadyMetric::Bandwidth, SteadyTest::Slope),
        _ => return Err(s.bad(FORM)),
    };
    let limit = limit.trim();
    let number = |text: &str| {
        text.trim()
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite() && *v >= 0.0)
            .ok_or_else(|| s.bad(FORM))
    };
    if let Some(percent) = limit.strip_suffix('%') {
        return Ok((metric, test, number(percent)?, true));
    }
    let value = match metric {
        SteadyMetric::Iops => number(limit)?,
        SteadyMetric::Bandwidth => values::size(limit).ok_or_else(|| s.bad(FORM))? as f64,
    };
    Ok((metric, test, value, false))
}
