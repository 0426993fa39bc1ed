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
