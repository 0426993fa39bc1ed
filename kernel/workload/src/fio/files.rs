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
            "filename" => {
                self.target = target(job, s.need()?)?;
                self.filename_given = true;
            }
            "filename_format" => self.filename_format = Some(s.need()?.to_string()),
            "nrfiles" | "nr_files" => {
                self.nrfiles = Some(
                    values::integer(s.need()?)
                        .filter(|n| (1..=MAX_FORMAT_FILES).contains(n))
                        .ok_or_else(|| s.bad(&format!("an integer from 1 to {MAX_FORMAT_FILES}")))?,
                )
            }
            "directory" => self.directory = Some(s.need()?.to_string()),
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

/// Most files `nrfiles` names through `filename_format`.
const MAX_FORMAT_FILES: u64 = 64;

impl Builder {
    /// Settles `filename_format`, `nrfiles` and `directory` once every option is applied: fio
    /// names the files of a job without `filename` by `filename_format` (`$jobname`, `$jobnum`,
    /// `$filenum`, matched without regard to case), `nrfiles` of them per clone; the names must
    /// be devices here, the same for every clone. `directory` is a folder fio puts the files in:
    /// with devices it is ignored (a warning says so), otherwise refused.
    pub(super) fn settle_files(&mut self) -> Result<(), WorkloadError> {
        let job = self.name.clone();
        match (&self.filename_format, self.filename_given) {
            (Some(format), true) => {
                let text = format!("filename_format={format}: ignored, filename names the files (as in fio)");
                self.warn(text);
            }
            (Some(format), false) => {
                let format = format.clone();
                let files = self.nrfiles.unwrap_or(1);
                let names_of = |clone: u64| -> Vec<String> {
                    (0..files)
                        .map(|file| format_file_name(&format, &job, clone, file))
                        .collect()
                };
                let names = names_of(0);
                if let Some(clone) = (1..u64::from(self.numjobs)).find(|c| names_of(*c) != names) {
                    return Err(unsupported(
                        &job,
                        &format!("filename_format={format}"),
                        format!(
                            "clone {clone} would get other devices ({}) than clone 0 ({}): every clone of a job runs on                              the same devices here; write one job per device",
                            names_of(clone).join(":"),
                            names.join(":")
                        ),
                    ));
                }
                let list = names
                    .iter()
                    .map(|n| n.replace(':', "\\:"))
                    .collect::<Vec<_>>()
                    .join(":");
                self.target = target(&job, &list).map_err(|_| {
                    unsupported(
                        &job,
                        &format!("filename_format={format}"),
                        format!(
                            "it names {}, and baremq has no file system: the names must be devices (/dev/NAME)",
                            names.join(", ")
                        ),
                    )
                })?;
                if matches!(self.target, Target::File(_)) {
                    return Err(unsupported(
                        &job,
                        &format!("filename_format={format}"),
                        format!(
                            "it names {}, and baremq has no file system: the names must be devices (/dev/NAME)",
                            names.join(", ")
                        ),
                    ));
                }
                let text = format!("filename_format={format}: the job's files are {}", names.join(", "));
                self.warn(text);
            }
            (None, _) => {
                if let Some(files) = self.nrfiles.filter(|n| *n > 1) {
                    return Err(unsupported(
                        &job,
                        "nrfiles",
                        format!(
                            "nrfiles={files} makes fio create files; baremq has no file system (name devices with                              filename=/dev/A:/dev/B or filename_format=/dev/...$filenum)"
                        ),
                    ));
                }
            }
        }
        if let Some(directory) = self.directory.clone() {
            if matches!(self.target, Target::Device(_) | Target::Devices(_)) {
                self.warn(format!(
                    "directory={directory}: ignored, the job's files are devices (/dev/NAME), which no directory holds"
                ));
            } else {
                return Err(unsupported(
                    &job,
                    "directory",
                    "baremq has no file system; name a device with filename=/dev/NAME (directory is then ignored)",
                ));
            }
        }
        Ok(())
    }
}

/// fio's `make_filename`: `format` with each `$jobname`, `$jobnum` (the clone, from 0) and
/// `$filenum` (from 0) replaced, keywords matched without regard to case, `$jobname` first.
pub(super) fn format_file_name(format: &str, job: &str, clone: u64, file: u64) -> String {
    let values = [
        ("$jobname", job.to_string()),
        ("$jobnum", clone.to_string()),
        ("$filenum", file.to_string()),
    ];
    let mut name = String::new();
    let mut rest = format;
    'scan: while let Some(first) = rest.chars().next() {
        for (keyword, value) in &values {
            if rest.len() >= keyword.len()
                && rest.is_char_boundary(keyword.len())
                && rest[..keyword.len()].eq_ignore_ascii_case(keyword)
            {
                name.push_str(value);
                rest = &rest[keyword.len()..];
                continue 'scan;
            }
        }
        name.push(first);
        rest = &rest[first.len_utf8()..];
    }
    name
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
                Some(device) if !device.is_empty() && !device.contains('=') => devices.push(block_name(device)),
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
        Some(device) => Target::Device(block_name(device)),
        None => Target::File(name),
    })
}

/// The block device a `/dev` name stands for: Linux's NVMe generic character device `ngXnY`
/// (what fio's `io_uring_cmd` examples name) is namespace Y of controller X, baremq's `nvmeXnY`;
/// any other name is itself.
fn block_name(device: &str) -> String {
    let generic = device
        .strip_prefix("ng")
        .and_then(|rest| rest.split_once('n'))
        .filter(|(controller, namespace)| {
            !controller.is_empty()
                && !namespace.is_empty()
                && controller.bytes().all(|b| b.is_ascii_digit())
                && namespace.bytes().all(|b| b.is_ascii_digit())
        });
    match generic {
        Some((controller, namespace)) => format!("nvme{controller}n{namespace}"),
        None => device.to_string(),
    }
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
