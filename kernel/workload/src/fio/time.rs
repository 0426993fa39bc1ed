//! When and how fast: `runtime`, `time_based`, `ramp_time`, `startdelay`, the rates
//! (`rate`, `rate_iops`, `rate_process`) and the think time.

use alloc::format;
use alloc::vec::Vec;

use super::values::{self, SIZE_FORM};
use super::{Builder, Setting, unsupported};
use crate::error::WorkloadError;

/// A bare number of these options counts seconds.
const SECONDS: u64 = 1_000_000_000;

impl Builder {
    /// The options of when and how fast; `Ok(false)`: not one of them.
    pub(super) fn apply_time(&mut self, s: &Setting<'_>) -> Result<bool, WorkloadError> {
        let job = s.job;
        let key = s.key;
        match key {
            "runtime" | "timeout" => self.runtime_ns = Some(s.time(SECONDS)?).filter(|ns| *ns > 0),
            "time_based" => self.time_based = s.flag()?,
            "ramp_time" => self.spec.ramp_ns = s.time(SECONDS)?,
            "rate_min" | "ratemin" | "rate_iops_min" => {
                // `value` or `read,write`, as `rate`.
                let parts: Vec<&str> = s.need()?.split(',').map(str::trim).collect();
                if parts.len() > 3 {
                    return Err(s.bad("one value, or read,write[,trim]"));
                }
                let iops = key == "rate_iops_min";
                let parse = |part: &str| -> Result<u64, WorkloadError> {
                    if part.is_empty() {
                        Ok(0)
                    } else if iops {
                        values::integer(part).ok_or_else(|| s.bad("I/Os per second, an integer"))
                    } else {
                        values::size(part).ok_or_else(|| s.bad(&format!("bytes per second: {SIZE_FORM}")))
                    }
                };
                let read = parse(parts[0])?;
                let write = if parts.len() == 1 { read } else { parse(parts[1])? };
                let min = self.spec.rate_min.get_or_insert(crate::job::RateMin {
                    bytes_per_s: [0, 0],
                    ios_per_s: [0, 0],
                    cycle_ns: 1_000_000_000,
                });
                if iops {
                    min.ios_per_s = [read, write];
                } else {
                    min.bytes_per_s = [read, write];
                }
            }
            "rate_cycle" | "ratecycle" => {
                let ms = values::integer(s.need()?)
                    .filter(|ms| (1..=u64::MAX / 1_000_000).contains(ms))
                    .ok_or_else(|| s.bad("milliseconds, an integer of at least 1"))?;
                self.rate_cycle_ns = Some(ms * 1_000_000);
            }
            "rate" | "rate_iops" => {
                // `value` or `read,write[,trim]`; an empty part is no limit for that direction.
                let parts: Vec<&str> = s.need()?.split(',').map(str::trim).collect();
                if parts.len() > 3 {
                    return Err(s.bad("one value, or read,write[,trim]"));
                }
                let parse = |part: &str| -> Result<u64, WorkloadError> {
                    if part.is_empty() {
                        return Ok(0);
                    }
                    if key == "rate" {
                        values::size(part).ok_or_else(|| s.bad(&format!("bytes per second: {SIZE_FORM}")))
                    } else {
                        values::integer(part).ok_or_else(|| s.bad("I/Os per second, an integer"))
                    }
                };
                let read = parse(parts[0])?;
                let write = if parts.len() == 1 { read } else { parse(parts[1])? };
                if parts.len() == 3 && !parts[2].is_empty() {
                    parse(parts[2])?; // trim has no I/Os here (rw=trim is refused)
                }
                if key == "rate" {
                    self.rate_bytes = [read, write];
                } else {
                    self.rate_iops = [read, write];
                }
            }
            "rate_process" => {
                self.spec.rate_poisson = match s.need()? {
                    "linear" => false,
                    "poisson" => true,
                    _ => return Err(s.bad("linear or poisson")),
                }
            }
            "thinktime" => self.spec.think_ns = s.time(1_000)?,
            "flow" => {
                self.spec.flow_weight = values::integer(s.need()?)
                    .filter(|w| *w <= u64::from(crate::flow::MAX_FLOW_WEIGHT))
                    .ok_or_else(|| s.bad(&format!("a weight from 0 to {}", crate::flow::MAX_FLOW_WEIGHT)))?
                    as u32
            }
            "flow_id" => {
                self.spec.flow_id = values::integer(s.need()?)
                    .and_then(|id| u32::try_from(id).ok())
                    .ok_or_else(|| s.bad("an integer id"))?
            }
            "flow_sleep" => {
                self.spec.flow_sleep_ns = values::integer(s.need()?)
                    .and_then(|us| us.checked_mul(1_000))
                    .ok_or_else(|| s.bad("microseconds, an integer"))?
            }
            "flow_watermark" => {
                self.warn("flow_watermark: accepted and ignored, as fio 3.33 ignores it (deprecated)".into())
            }
            "thinktime_spin" => self.think_spin_ns = s.time(1_000)?,
            "thinktime_blocks" => {
                self.spec.think_blocks = values::integer(s.need()?)
                    .filter(|n| (1..=u64::from(u32::MAX)).contains(n))
                    .ok_or_else(|| s.bad("an integer of at least 1"))? as u32
            }
            "startdelay" => {
                if s.need()?.contains('-') {
                    return Err(unsupported(
                        job,
                        "startdelay",
                        "a random start delay (a range) is not implemented",
                    ));
                }
                self.spec.start_delay_ns = s.time(SECONDS)?;
            }
            _ => return Ok(false),
        }
        Ok(true)
    }
}
