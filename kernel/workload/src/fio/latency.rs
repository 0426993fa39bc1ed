//! fio's latency target: `latency_target` (bare: microseconds), `latency_window` (bare:
//! microseconds), `latency_percentile` (default 100) and `latency_run`. With a target above 0 each
//! clone searches for the deepest queue depth, up to `iodepth`, at which its I/Os finish within
//! it (`crate::engine`'s depth search, fio 3.33's); without one the others change nothing.

use super::{Builder, Setting};
use crate::error::WorkloadError;
use crate::job::LatencyTarget;

/// A bare number of `latency_target` and `latency_window` counts microseconds.
const MICROSECONDS: u64 = 1_000;

impl Builder {
    /// The latency-target options; `Ok(false)`: not one of them.
    pub(super) fn apply_latency_target(&mut self, s: &Setting<'_>) -> Result<bool, WorkloadError> {
        let mut target = self.latency_target.unwrap_or(LatencyTarget {
            target_ns: 0,
            window_ns: 0,
            percentile_millionths: 100_000_000,
            keep_searching: false,
        });
        match s.key {
            "latency_target" => target.target_ns = s.time(MICROSECONDS)?,
            "latency_window" => target.window_ns = s.time(MICROSECONDS)?,
            "latency_percentile" => {
                // fio takes a float list here; the first value is the percentile.
                let text = s.need()?;
                let first = text.split(':').next().unwrap_or(text).trim();
                let percent = first
                    .parse::<f64>()
                    .ok()
                    .filter(|p| p.is_finite() && *p > 0.0 && *p <= 100.0)
                    .ok_or_else(|| s.bad("a percentage above 0 and at most 100, e.g. 99.9"))?;
                target.percentile_millionths = (percent * 1_000_000.0 + 0.5) as u32;
            }
            "latency_run" => target.keep_searching = s.flag()?,
            _ => return Ok(false),
        }
        self.latency_target = Some(target);
        Ok(true)
    }

    /// Once every option is in: a target of 0 (fio's default) is no target.
    pub(super) fn settle_latency_target(&mut self) {
        self.spec.latency_target = self.latency_target.filter(|t| t.target_ns > 0);
    }
}
