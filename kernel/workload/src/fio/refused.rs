//! The fio options baremq does not carry out: those accepted as no-ops (listed in the job's
//! warnings) and those refused, with their reasons.

use alloc::format;
use alloc::string::ToString;

use super::values;
use super::{Builder, Setting, unsupported};
use crate::error::WorkloadError;

/// Options accepted as no-ops: on a raw device with no page cache, files or processes, they
/// change nothing. Each one accepted is listed in the job's warnings.
pub const NO_OP_OPTIONS: [&str; 22] = [
    "invalidate",
    "gtod_reduce",
    "refill_buffers",
    "scramble_buffers",
    "fallocate",
    "overwrite",
    "iodepth_batch",
    "iodepth_batch_submit",
    "iodepth_batch_complete",
    "iodepth_batch_complete_min",
    "iodepth_batch_complete_max",
    "iodepth_low",
    "exitall_on_error",
    "softrandommap",
    "random_generator",
    "per_job_logs",
    "cpus_allowed_policy",
    "kb_base",
    "unit_base",
    "log_offset",
    // Serializes the creation of a job's files; devices are not created.
    "create_serialize",
    // The tiobench profile's thread count, which fio 3.33 accepts in any job (its own
    // examples/steadystate.fio sets it) and uses only with `profile=tiobench`.
    "threads",
];

/// fio options refused with a specific reason (everything else unknown gets a generic one).
const REFUSED: &[(&str, &str)] = &[
    ("openfiles", "baremq has no file system"),
    ("create_on_open", "baremq has no file system"),
    ("unlink", "baremq has no file system"),
    ("fadvise_hint", "baremq has no file system or page cache"),
    ("opendir", "baremq has no file system"),
    ("blocksize_unaligned", "the engine uses bs-aligned blocks"),
    ("rate_ignore_thinktime", "rates and think times are separate here"),
    ("thinktime_blocks_type", "think time counts issued I/Os"),
    (
        "verify_backlog_batch",
        "verify_backlog reads back all N blocks at once; batches of them are not implemented",
    ),
    ("verify_offset", "baremq verifies whole blocks"),
    ("verify_async", "baremq verifies on the submitting CPU"),
    (
        "verify_only",
        "a verify-only run of a written job is not implemented; use a read job with verify",
    ),
    ("verify_state_save", "verify state files need a file system"),
    ("verify_state_load", "verify state files need a file system"),
    (
        "trim_percentage",
        "trimming verified blocks (fio's verify trim options) is not implemented",
    ),
    ("zonemode", "zoned devices are not supported"),
    (
        "prio",
        "I/O priorities order requests in a scheduler or a device that honours them; baremq has no I/O scheduler and its drivers send every request as it comes, so a priority would change nothing (not implemented)",
    ),
    (
        "prioclass",
        "I/O priorities order requests in a scheduler or a device that honours them; baremq has no I/O scheduler and its drivers send every request as it comes, so a priority would change nothing (not implemented)",
    ),
    (
        "cmdprio",
        "I/O priorities order requests in a scheduler or a device that honours them; baremq has no I/O scheduler and its drivers send every request as it comes, so a priority would change nothing (not implemented)",
    ),
    (
        "cmdprio_class",
        "I/O priorities order requests in a scheduler or a device that honours them; baremq has no I/O scheduler and its drivers send every request as it comes, so a priority would change nothing (not implemented)",
    ),
    (
        "cmdprio_percentage",
        "I/O priorities order requests in a scheduler or a device that honours them; baremq has no I/O scheduler and its drivers send every request as it comes, so a priority would change nothing (not implemented)",
    ),
    (
        "cmdprio_bssplit",
        "I/O priorities order requests in a scheduler or a device that honours them; baremq has no I/O scheduler and its drivers send every request as it comes, so a priority would change nothing (not implemented)",
    ),
    (
        "log_prio",
        "I/O priorities order requests in a scheduler or a device that honours them; baremq has no I/O scheduler and its drivers send every request as it comes, so a priority would change nothing (not implemented)",
    ),
    (
        "priohint",
        "I/O priorities order requests in a scheduler or a device that honours them; baremq has no I/O scheduler and its drivers send every request as it comes, so a priority would change nothing (not implemented)",
    ),
    ("nice", "there are no processes to renice"),
    ("lockmem", "there are no processes"),
    (
        "spdk_conf",
        "SPDK configuration has no meaning here; name the device with filename=/dev/NAME",
    ),
    ("exec_prerun", "there is no shell to run commands"),
];

impl Builder {
    /// A key no family of options took: a no-op accepted with a warning, or refused.
    pub(super) fn apply_unhandled(&mut self, s: &Setting<'_>) -> Result<(), WorkloadError> {
        let job = s.job;
        let key = s.key;
        match key {
            _ if NO_OP_OPTIONS.contains(&key) => {
                let on = s.value.is_none_or(|v| values::boolean(v) != Some(false));
                self.set_keys.retain(|k| k != key);
                if on {
                    self.set_keys.push(key.to_string());
                }
                self.warn(format!(
                    "{key}: accepted, changes nothing on baremq (no processes, files or page cache)"
                ));
            }
            _ => {
                let reason = REFUSED
                    .iter()
                    .find(|(k, _)| *k == key)
                    .map(|(_, r)| (*r).to_string())
                    .unwrap_or_else(|| {
                        "baremq does not implement this fio option (or it is not a fio option); docs/fio.md lists \
                         what runs"
                            .into()
                    });
                return Err(unsupported(job, key, reason));
            }
        }
        Ok(())
    }
}
