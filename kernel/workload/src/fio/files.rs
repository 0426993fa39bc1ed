//! Where a job runs: `filename` (a device, or a list of them), `file_service_type`, and the
//! clones (`numjobs`, `offset_increment`) and their CPUs (`cpus_allowed`, `cpumask`).

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use super::values::{self};
use super::{Builder, MAX_NUMJOBS, Setting, Target, unsupported};
use crate::error::WorkloadError;
use crate::values::CpuSet;

impl Builder {
    /// The options of where the job runs; `Ok(false)`: not one of them.
    pub(super) fn apply_files(&mut self, s: &Setting<'_>) -> Result<bool, WorkloadError> {
        let job = s.job;
        let key = s.key;
        match key {
            "filename" => self.target = target(job, s.need()?)?,
            "file_service_type" => {
                let v = s.need()?;
                self.spec.file_service = file_service(job, v)?;
                self.file_service_given = Some(v.to_string());
            }
            "offset_increment" => self.offset_increment = s.size()?,
            "numjobs" => {
                self.numjobs = values::integer(s.need()?)
                    .filter(|n| (1..=MAX_NUMJOBS).contains(n))
                    .ok_or_else(|| s.bad(&format!("an integer from 1 to {MAX_NUMJOBS}")))?
                    as u32
            }
            "cpus_allowed" => {
                let set = CpuSet::parse(s.need()?).ok_or_else(|| s.bad(crate::values::CPU_LIST_FORM))?;
                self.cpus_allowed = Some(set);
            }
            "cpumask" => {
                let mask = values::integer(s.need()?).ok_or_else(|| s.bad("a CPU bit mask, decimal or 0x hex"))?;
                let cpus: Vec<u32> = (0..64).filter(|bit| mask & (1u64 << bit) != 0).collect();
                self.cpus_allowed = Some(CpuSet::from_cpus(&cpus));
            }
            _ => return Ok(false),
        }
        Ok(true)
    }
}

fn target(job: &str, value: &str) -> Result<Target, WorkloadError> {
    // fio separates several files with ':' and escapes a literal ':' as '\:'.
    let mut parts = Vec::new();
    let mut current = String::new();
    let mut chars = value.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&':') => {
                current.push(':');
                chars.next();
            }
            ':' => parts.push(core::mem::take(&mut current)),
            _ => current.push(c),
        }
    }
    parts.push(current);
    if parts.len() > 1 {
        let mut devices = Vec::with_capacity(parts.len());
        for part in &parts {
            match part.strip_prefix("/dev/") {
                Some(device) if !device.is_empty() && !device.contains('=') => devices.push(device.to_string()),
                _ => {
                    return Err(unsupported(
                        job,
                        &format!("filename={value}"),
                        format!(
                            "{part:?} in a file list is not a device: baremq has no file system, so a list names \
                             devices only (/dev/A:/dev/B)"
                        ),
                    ));
                }
            }
        }
        return Ok(Target::Devices(devices));
    }
    let name = parts.remove(0);
    if name.contains('=') {
        return Err(unsupported(
            job,
            &format!("filename={value}"),
            "SPDK's trtype=... form is not implemented; name the device with filename=/dev/NAME",
        ));
    }
    Ok(match name.strip_prefix("/dev/") {
        Some(device) => Target::Device(device.to_string()),
        None => Target::File(name),
    })
}

/// fio's `file_service_type=TYPE[:N]`.
fn file_service(job: &str, value: &str) -> Result<crate::job::FileService, WorkloadError> {
    use crate::job::FileService;
    let (name, count) = match value.split_once(':') {
        Some((name, count)) => (name, Some(count)),
        None => (value, None),
    };
    let bad = |expected: &str| WorkloadError::FioBadValue {
        job: job.to_string(),
        option: "file_service_type".into(),
        value: value.to_string(),
        expected: expected.to_string(),
    };
    if matches!(name, "zipf" | "pareto" | "normal" | "gauss") {
        return Err(unsupported(
            job,
            &format!("file_service_type={value}"),
            "skewed file choice is not implemented; use roundrobin, sequential or random",
        ));
    }
    let n = match count {
        None => 1,
        Some(text) => values::integer(text)
            .filter(|n| (1..=u64::from(u32::MAX)).contains(n))
            .ok_or_else(|| bad("roundrobin, sequential or random, with :N (I/Os per file turn, at least 1)"))?
            as u32,
    };
    match name {
        "roundrobin" => Ok(FileService::RoundRobin(n)),
        // fio takes a count after `sequential` too, and a file's turn lasts until it is done
        // whatever the count.
        "sequential" => Ok(FileService::Sequential),
        "random" => Ok(FileService::Random(n)),
        _ => Err(bad(
            "roundrobin, sequential or random, with :N (I/Os per file turn, at least 1)",
        )),
    }
}
