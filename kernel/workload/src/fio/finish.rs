//! Settling a job once all its options are applied: the checks and defaults that span
//! several options, and the [`FioJob`] they make.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use super::values::SizeOrPercent;
use super::{Builder, FioJob, FioRunOptions, MIN_LOG_MSEC, SYNC_ENGINES, Target, unsupported};
use crate::error::WorkloadError;
use crate::job::{DEFAULT_SEED, VerifyMode};

/// The averaging window of logs whose job leaves `log_avg_msec` at fio's 0 (a row per I/O): fio's
/// own bandwidth-sampling period, `bw_avg_time`'s default.
const PER_IO_LOG_WINDOW_MSEC: u64 = 500;

impl Builder {
    pub(super) fn finish(
        mut self,
        group: u32,
        serial_set: u32,
        options: Vec<(String, String)>,
        run: &FioRunOptions,
    ) -> Result<FioJob, WorkloadError> {
        let job = self.name.clone();
        if self.fill_device {
            // fio keeps writing until the device is full: on a block device, its end.
            let given = self.size.take();
            self.warn(format!(
                "fill_device=1: the job runs from its offset to the end of its device{}",
                if given.is_some() { " (its size is ignored)" } else { "" }
            ));
        }
        self.settle_steady();
        self.settle_latency_target();
        self.settle_files()?;
        self.settle_block_sizes(&job)?;
        // A step of rw=NAME:SIZE that is not whole blocks makes the unit smaller: first.
        self.settle_offset_modifier(&job, u64::from(self.spec.bs))?;
        let bs = u64::from(self.spec.bs);
        self.settle_blockalign(&job, bs)?;
        self.settle_zones(&job, bs)?;
        if self.spec.bs_mix.is_some() && self.rate_bytes != [0, 0] {
            return Err(unsupported(
                &job,
                "rate",
                "a byte rate with variable block sizes is not implemented (the pacing is per I/O); use rate_iops",
            ));
        }
        if self.spec.bs_mix.is_some() && self.number_ios.is_some() {
            return Err(unsupported(
                &job,
                "number_ios",
                "number_ios with variable block sizes is not implemented (a size-bound job with them counts bytes); use io_size",
            ));
        }
        for direction in 0..2 {
            let (bytes, iops) = (self.rate_bytes[direction], self.rate_iops[direction]);
            self.spec.io_interval_ns[direction] = match (bytes, iops) {
                (0, 0) => 0,
                (0, iops) => 1_000_000_000u64.div_ceil(iops),
                (bytes, 0) => (bs * 1_000_000_000).div_ceil(bytes),
                _ => {
                    return Err(unsupported(
                        &job,
                        "rate_iops",
                        "give rate or rate_iops for a direction, not both",
                    ));
                }
            };
        }
        if self.think_spin_ns > self.spec.think_ns {
            return Err(WorkloadError::FioBadValue {
                job,
                option: "thinktime_spin".into(),
                value: self.think_spin_ns.to_string(),
                expected: "at most thinktime".into(),
            });
        }
        if self.think_spin_ns > 0 {
            self.warn("thinktime_spin: the whole think time is a polling wait here".into());
        }
        // On a device, closing the file and the end of the job are the same moment.
        self.spec.end_flush = self.end_fsync || self.fsync_on_close;
        let engine = self.ioengine.clone().unwrap_or_else(|| "psync".into());
        if SYNC_ENGINES.contains(&engine.as_str()) {
            if self.spec.iodepth > 1 {
                self.warn(format!(
                    "ioengine={engine} is synchronous: queue depth capped at 1 as fio does (iodepth={} ignored)",
                    self.spec.iodepth
                ));
            }
            self.spec.iodepth = 1;
        } else if engine == "null" {
            self.warn("ioengine=null moves no data in fio; baremq does the I/O on the device".into());
        }
        if !self.direct {
            self.warn(
                "direct=0 (fio's default, buffered): baremq has no page cache, every I/O goes to the device".into(),
            );
        }
        // Time: a runtime caps a size-bound job unless time_based.
        if self.time_based && self.runtime_ns.is_none() {
            return Err(WorkloadError::FioBadValue {
                job,
                option: "time_based".into(),
                value: String::new(),
                expected: "a runtime as well (time_based repeats the workload until the runtime)".into(),
            });
        }
        self.spec.runtime_ns = self.runtime_ns;
        self.spec.runtime_is_cap = !self.time_based;
        // Amount of I/O per clone.
        let per_pass = match (self.number_ios, self.io_size) {
            (Some(n), _) => Some(n),
            (None, Some(bytes)) => {
                if !bytes.is_multiple_of(bs) {
                    return Err(WorkloadError::FioBadValue {
                        job,
                        option: "io_size".into(),
                        value: bytes.to_string(),
                        expected: format!("a multiple of bs ({bs})"),
                    });
                }
                Some(bytes / bs)
            }
            (None, None) => None,
        };
        // Where: size, offset, clones.
        let mut size_percent = None;
        match self.size {
            Some(SizeOrPercent::Bytes(b)) => self.spec.size = Some(b),
            Some(SizeOrPercent::Percent(p)) => size_percent = Some(p),
            None => {}
        }
        let mut offset_percent = None;
        match self.offset {
            Some(SizeOrPercent::Bytes(b)) => self.spec.offset = b,
            Some(SizeOrPercent::Percent(p)) => offset_percent = Some(p),
            None => {}
        }
        self.spec.clone_increment = Some(self.offset_increment);
        // Randomness.
        self.spec.random_map = !self.norandommap;
        if let Some(skew) = self.spec.skew.filter(|_| !self.norandommap && self.spec.rw.is_random()) {
            self.warn(format!(
                "random_distribution={skew}: offsets are drawn with repeats (no random map, as in fio)"
            ));
        }
        if !self.spec.zones.is_empty() && !self.norandommap && self.spec.rw.is_random() {
            self.warn(
                "random_distribution=zoned: offsets are drawn with repeats inside each zone (no random map)".into(),
            );
        }
        let seed_from_clock = self.randseed.is_none() && !self.randrepeat;
        self.spec.seed = self.randseed.unwrap_or(DEFAULT_SEED);
        // Verify and errors. fio 3.33: verify_pattern without a verify option checks a header
        // and the pattern (its VERIFY_PATTERN); verify=pattern is the pattern alone.
        if !self.spec.verify_pattern.is_empty() && self.verify_name.is_empty() {
            self.verify = VerifyMode::FioPatternHeader;
            self.verify_name = "pattern".into();
        }
        // fio 3.33's verify=meta is its header alone (VERIFY_HDR_ONLY), after which a
        // verify_pattern is checked too: a header over the pattern, as without a verify option.
        if !self.spec.verify_pattern.is_empty() && self.verify_name == "meta" {
            self.verify = VerifyMode::FioPatternHeader;
        }
        match (self.verify, self.spec.verify_pattern.is_empty()) {
            (VerifyMode::FioPattern, true) => {
                return Err(WorkloadError::FioBadValue {
                    job,
                    option: "verify".into(),
                    value: "pattern".into(),
                    expected: "a verify_pattern as well (the bytes to write and check)".into(),
                });
            }
            (VerifyMode::Crc32c, false) => {
                return Err(unsupported(
                    &job,
                    "verify_pattern",
                    format!(
                        "with verify={} fio puts its checksum header over the pattern; baremq checks either the \
                         plain pattern (verify=pattern, or no verify option) or its own header and CRC32C",
                        self.verify_name
                    ),
                ));
            }
            (VerifyMode::None, false) => self.spec.verify_pattern.clear(),
            _ => {}
        }
        self.spec.verify = self.verify;
        if self.verify.is_enabled() {
            // do_verify=0 (fio): writes are stamped and nothing is read back (a later job or boot
            // checks); a job that only reads checks nothing.
            if !self.do_verify {
                if self.spec.rw.reads() && self.spec.rw.writes() {
                    return Err(unsupported(
                        &job,
                        "do_verify",
                        "do_verify=0 on a job that reads and writes: baremq checks every read of a block the job \
                         wrote; give the writes and the reads jobs of their own",
                    ));
                }
                if self.spec.rw.writes() {
                    self.spec.skip_verify_pass = true;
                } else {
                    self.spec.verify = VerifyMode::None;
                }
            }
            if self.verify == VerifyMode::FioPatternHeader && self.verify_name == "meta" {
                self.warn(
                    "verify=meta with verify_pattern: baremq's block header over the pattern, and the pattern \
                     checked after it, as fio checks its own header and then the pattern"
                        .into(),
                );
            } else if !matches!(self.verify_name.as_str(), "crc32c" | "crc32c-intel" | "pattern") {
                self.warn(format!(
                    "verify={}: baremq checks its own block header and CRC32C, not fio's {} format",
                    self.verify_name, self.verify_name
                ));
            }
        }
        if let Some(interval) = self.verify_interval
            && interval != bs
        {
            // The planner checks it against the device's sectors and the block.
            self.spec.verify_interval = u32::try_from(interval).map_err(|_| {
                unsupported(
                    &job,
                    "verify_interval",
                    format!("verify_interval={interval} is larger than any block (bs is {bs})"),
                )
            })?;
        }
        if let (Some(min), Some(cycle)) = (&mut self.spec.rate_min, self.rate_cycle_ns) {
            min.cycle_ns = cycle;
        }
        if self
            .spec
            .rate_min
            .is_some_and(|m| m.bytes_per_s == [0, 0] && m.ios_per_s == [0, 0])
        {
            self.spec.rate_min = None;
        }
        if self.dedupe_percent > 0 || self.compress_percent > 0 {
            let option = if self.dedupe_percent > 0 {
                "dedupe_percentage"
            } else {
                "buffer_compress_percentage"
            };
            if self.verify.is_enabled() {
                return Err(unsupported(
                    &job,
                    option,
                    "with verify, baremq writes its own block format (header and checksum, or verify_pattern); \
                     dedupe and compressible contents are for jobs without verify",
                ));
            }
            if self.buffer_pattern.is_some() {
                return Err(unsupported(
                    &job,
                    option,
                    "with buffer_pattern as the compressible part of a buffer is not implemented: the fixed part is \
                     zeros",
                ));
            }
            self.spec.write_content = Some(crate::content::WriteContent {
                dedupe_percent: self.dedupe_percent,
                working_set_percent: (self.dedupe_working_set && self.dedupe_percent > 0)
                    .then_some(self.dedupe_working_set_percent.max(1)),
                global: self.dedupe_global,
                compress_percent: self.compress_percent,
                compress_chunk: self.compress_chunk,
            });
        }
        if let Some(pattern) = self.buffer_pattern.take() {
            if self.verify.is_enabled() {
                return Err(unsupported(
                    &job,
                    "buffer_pattern",
                    "with verify, baremq writes its own block format (header and checksum, or verify_pattern); \
                     write data of buffer_pattern is for jobs without verify",
                ));
            }
            self.spec.buffer_pattern = pattern;
        }
        // fio stops at the first error unless continue_on_error names its class; verify_fatal
        // makes a mismatch stop the job whatever continue_on_error says.
        let mut going_on = self.continue_on_error;
        if self.verify_fatal {
            going_on &= !(crate::job::ErrorClass::Verify as u8);
        }
        self.spec.stop_on_error = going_on != crate::job::ErrorClass::ALL;
        self.spec.continue_on = if self.spec.stop_on_error { going_on } else { 0 };
        if run.readonly && (self.spec.rw.writes() || self.spec.rw.trims()) {
            return Err(unsupported(
                &job,
                "readonly",
                format!(
                    "rw={} {}",
                    self.spec.rw.as_str(),
                    if self.spec.rw.writes() { "writes" } else { "trims" }
                ),
            ));
        }
        let logs = &mut self.report.logs;
        if logs.log_avg_msec == 0 && (logs.bw_log.is_some() || logs.lat_log.is_some() || logs.iops_log.is_some()) {
            // fio's default: a row per I/O, which a serial console cannot carry. Windows of fio's
            // own bandwidth-sampling period (its bw_avg_time) instead, said in a warning.
            logs.log_avg_msec = PER_IO_LOG_WINDOW_MSEC;
            self.warn(format!(
                "log_avg_msec=0 (fio's default: a log row per I/O): the logs go over the serial console, so each row \
                 averages {PER_IO_LOG_WINDOW_MSEC} ms (log_avg_msec={PER_IO_LOG_WINDOW_MSEC})"
            ));
        }
        let logs = &self.report.logs;
        if logs.any()
            && logs.log_avg_msec < MIN_LOG_MSEC
            && (logs.bw_log.is_some() || logs.lat_log.is_some() || logs.iops_log.is_some())
        {
            return Err(unsupported(
                &job,
                "log_avg_msec",
                format!(
                    "logs go over the serial console: windows under {MIN_LOG_MSEC} ms are refused, give log_avg_msec={MIN_LOG_MSEC} or more"
                ),
            ));
        }
        if logs.hist_log.is_some() && logs.log_hist_msec < MIN_LOG_MSEC {
            return Err(unsupported(
                &job,
                "log_hist_msec",
                format!("histogram logs go over the serial console: give log_hist_msec={MIN_LOG_MSEC} or more"),
            ));
        }
        if let (Some(given), false) = (&self.file_service_given, matches!(self.target, Target::Devices(_))) {
            self.warn(format!(
                "file_service_type={given}: the job has one file (device), so there is no file to switch to"
            ));
        }
        if let Target::File(path) = &self.target {
            self.warn(format!(
                "filename={path} is a file to fio; baremq has no file system and runs the job on the device itself"
            ));
        }
        Ok(FioJob {
            name: self.name,
            description: self.description,
            group,
            serial_set,
            wave: 0,
            numjobs: self.numjobs,
            cpus_allowed: self.cpus_allowed,
            numa_cpu_nodes: self.numa_cpu_nodes,
            target: self.target,
            exit_what: self.exit_what,
            size_percent,
            size_per_file: self.size_per_file,
            offset_percent,
            seed_from_clock,
            ios_per_pass: per_pass,
            loops: self.loops,
            ioengine: engine,
            spec: self.spec,
            report: self.report,
            options,
            warnings: self.warnings,
            set_keys: self.set_keys,
        })
    }
}

impl Builder {
    /// fio's `blockalign`: random offsets are multiples of it (fio draws `b x blockalign` over
    /// the region, which turns its random map off). Here offsets are whole blocks of the
    /// smallest block size, so it is that size (the default, a no-op) or a whole multiple of it,
    /// with one block size or `bssplit`, uniform or `zoned` draws (a zoned draw is moved down to
    /// the alignment); sequential jobs ignore it, as fio does.
    fn settle_blockalign(&mut self, job: &str, bs: u64) -> Result<(), WorkloadError> {
        let Some(align) = self.blockalign else {
            return Ok(());
        };
        if align == bs {
            return Ok(());
        }
        if !self.spec.rw.is_random() {
            self.warn(format!(
                "blockalign={align}: aligns random offsets only; this job's offsets are sequential (as in fio)"
            ));
            return Ok(());
        }
        if align < bs || !align.is_multiple_of(bs) {
            return Err(unsupported(
                job,
                "blockalign",
                format!(
                    "offsets here are whole blocks of the smallest block size ({bs}): blockalign must be a whole \
                     multiple of it"
                ),
            ));
        }
        if self.spec.skew.is_some() {
            return Err(unsupported(
                job,
                "blockalign",
                "aligned draws with a random_distribution other than random or zoned are not implemented",
            ));
        }
        self.spec.align_blocks = align / bs;
        if !self.norandommap {
            self.warn(format!(
                "blockalign={align}: random offsets are multiples of {align} bytes, drawn with repeats (blockalign \
                 turns the random map off, as in fio)"
            ));
            self.norandommap = true;
        }
        Ok(())
    }
}
