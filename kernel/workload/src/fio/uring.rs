//! The io_uring engines' own options (`ioengine=io_uring` / `io_uring_cmd`): knobs of how a Linux
//! process hands I/O to the kernel, which a clone here does not do (it calls the driver itself,
//! with no system call, ring or registered file between). Accepted with a warning naming what
//! stands in for each; a value fio would refuse is refused.

use alloc::format;

use super::{Builder, Setting};
use crate::error::WorkloadError;

/// The io_uring submission knobs that change nothing here.
const SUBMISSION_KNOBS: [&str; 7] = [
    "sqthread_poll",
    "sqthread_poll_cpu",
    "registerfiles",
    "fixedbufs",
    "nonvectored",
    "force_async",
    "uncached",
];

impl Builder {
    /// The io_uring engines' options; `Ok(false)`: not one of them.
    pub(super) fn apply_uring(&mut self, s: &Setting<'_>) -> Result<bool, WorkloadError> {
        match s.key {
            "cmd_type" => {
                // fio 3.33's io_uring_cmd knows one command set.
                if s.need()? != "nvme" {
                    return Err(s.bad("nvme (fio's only command type)"));
                }
                self.warn(
                    "cmd_type=nvme: accepted; baremq's NVMe driver issues NVMe commands for every I/O, and a job's \
                     device is named by its block name (/dev/nvme0n1 for the character device /dev/ng0n1)"
                        .into(),
                );
            }
            "hipri" => {
                if s.flag()? {
                    self.warn(
                        "hipri: polled completions are chosen per CPU on the kernel command line \
                         (nvme.poll_queues=N), not per job"
                            .into(),
                    );
                }
            }
            key if SUBMISSION_KNOBS.contains(&key) => self.warn(format!(
                "{key}: accepted, changes nothing: io_uring's submission knobs have no counterpart here (a \
                 clone calls the driver on its own CPU, with no system call or ring to tune)"
            )),
            _ => return Ok(false),
        }
        Ok(true)
    }
}
