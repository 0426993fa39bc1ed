//! What the report shows of a job: its name and description, percentiles, logs and
//! `group_reporting`.

use alloc::string::{String, ToString};
use alloc::vec::Vec;

use super::values::{self, Percentile};
use super::{Builder, Setting};
use crate::error::WorkloadError;

/// fio's per-job log options (`write_*_log`, `log_avg_msec`, ...), parsed for the output side.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LogOptions {
    /// `write_bw_log=PREFIX`: files `PREFIX_bw.N.log`; a bare key uses the job name.
    pub bw_log: Option<String>,
    /// `write_lat_log=PREFIX`: `PREFIX_slat/_clat/_lat.N.log`.
    pub lat_log: Option<String>,
    /// `write_iops_log=PREFIX`: `PREFIX_iops.N.log`.
    pub iops_log: Option<String>,
    /// `write_hist_log=PREFIX`: `PREFIX_clat_hist.N.log`.
    pub hist_log: Option<String>,
    /// `log_avg_msec`: window of the bw/lat/iops logs (at least [`MIN_LOG_MSEC`] when a log is on).
    pub log_avg_msec: u64,
    /// `log_hist_msec`: window of the histogram log.
    pub log_hist_msec: u64,
}

impl LogOptions {
    /// Whether any log was asked for.
    pub fn any(&self) -> bool {
        self.bw_log.is_some() || self.lat_log.is_some() || self.iops_log.is_some() || self.hist_log.is_some()
    }
}

/// Shortest log window: logs go over the serial console, so per-I/O logs (fio's
/// `log_avg_msec=0`) and windows below this are refused.
pub const MIN_LOG_MSEC: u64 = 100;

/// Per-job options of fio's report, for the output side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FioReportOptions {
    /// `group_reporting`: one `jobs[]` entry for all clones.
    pub group_reporting: bool,
    /// `percentile_list`; fio's default list when not given.
    pub percentile_list: Vec<Percentile>,
    /// `clat_percentiles` (default on).
    pub clat_percentiles: bool,
    /// `lat_percentiles` (default off).
    pub lat_percentiles: bool,
    /// `slat_percentiles` (default off).
    pub slat_percentiles: bool,
    /// The logs.
    pub logs: LogOptions,
}

impl Builder {
    /// The report's options (and the job's name and description); `Ok(false)`: not one of them.
    pub(super) fn apply_report(&mut self, s: &Setting<'_>) -> Result<bool, WorkloadError> {
        let key = s.key;
        match key {
            "name" => {}
            "description" => self.description = Some(s.need()?.trim_matches('"').to_string()),
            "group_reporting" => self.report.group_reporting = s.flag()?,
            "percentile_list" => {
                self.report.percentile_list = values::percentiles(s.need()?)
                    .ok_or_else(|| s.bad("up to 20 percentages above 0 and at most 100, separated by :"))?
            }
            "clat_percentiles" => self.report.clat_percentiles = s.flag()?,
            "lat_percentiles" => self.report.lat_percentiles = s.flag()?,
            "slat_percentiles" => self.report.slat_percentiles = s.flag()?,
            "write_bw_log" | "write_lat_log" | "write_iops_log" | "write_hist_log" => {
                let prefix = match s.value {
                    Some(v) if !v.is_empty() => v.to_string(),
                    _ => self.name.clone(),
                };
                let logs = &mut self.report.logs;
                match key {
                    "write_bw_log" => logs.bw_log = Some(prefix),
                    "write_lat_log" => logs.lat_log = Some(prefix),
                    "write_iops_log" => logs.iops_log = Some(prefix),
                    _ => logs.hist_log = Some(prefix),
                }
            }
            "log_avg_msec" => {
                self.report.logs.log_avg_msec = values::integer(s.need()?).ok_or_else(|| s.bad("milliseconds"))?
            }
            "log_hist_msec" => {
                self.report.logs.log_hist_msec = values::integer(s.need()?).ok_or_else(|| s.bad("milliseconds"))?
            }
            _ => return Ok(false),
        }
        Ok(true)
    }
}
