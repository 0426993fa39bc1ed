//! When a job starts beside or after the others: `stonewall`, `new_group`, `wait_for`, and
//! the waves they cut the jobs into (the `fio` module's docs, "Scheduling").

use alloc::format;
use alloc::vec::Vec;

use super::{Builder, ExitWhat, FioJob, FioRun, Setting, unsupported};
use crate::error::WorkloadError;
use crate::job::JobSpec;
use crate::plan::DeviceInfo;

impl Builder {
    /// The options of when the job starts; `Ok(false)`: not one of them.
    pub(super) fn apply_schedule(&mut self, s: &Setting<'_>) -> Result<bool, WorkloadError> {
        let key = s.key;
        match key {
            "stonewall" | "wait_for_previous" => self.stonewall = s.flag()?,
            "new_group" => self.new_group = s.flag()?,
            "wait_for" => {
                s.need()?;
            }
            "thread" => {
                if s.flag()? {
                    self.warn(
                        "thread: accepted: baremq's clones already are threads of one program (contexts on its CPUs, in \
                         one address space), which is what fio's thread asks for instead of processes"
                            .into(),
                    );
                }
            }
            "exitall" => {
                self.exitall = s.flag()?;
                self.set_keys.retain(|k| k != key);
                if self.exitall {
                    self.set_keys.push(key.into());
                }
            }
            "exit_what" => {
                self.exit_what = match s.need()? {
                    "group" => ExitWhat::Group,
                    "stonewall" => ExitWhat::Stonewall,
                    "all" => ExitWhat::All,
                    _ => return Err(s.bad("group, stonewall or all")),
                }
            }
            "io_submit_mode" => match s.need()? {
                // fio's default: the job's own thread submits, as each clone's CPU does here.
                "inline" => {}
                // fio's offload hands each I/O to helper threads that submit it, for jobs whose own
                // thread should only pace (its rate examples). A clone here submits on its own CPU
                // and has nothing to hand to; what offload is for, submissions on time, it does
                // inline.
                "offload" => self.warn(
                    "io_submit_mode=offload: accepted, each clone submits on its own CPU (there are no helper \
                     threads to hand I/O to)"
                        .into(),
                ),
                _ => return Err(s.bad("inline or offload")),
            },
            _ => return Ok(false),
        }
        Ok(true)
    }
}

/// Cuts the jobs into waves (see the `fio` module's docs) and checks `wait_for`.
pub(super) fn assign_waves(jobs: &mut [FioJob]) -> Result<(), WorkloadError> {
    let mut wave = 0u32;
    for index in 0..jobs.len() {
        let wait_for = jobs[index]
            .options
            .iter()
            .rev()
            .find(|(k, _)| k == "wait_for")
            .map(|(_, v)| v.clone());
        let target = match &wait_for {
            Some(target) => match jobs[..index].iter().position(|j| &j.name == target) {
                Some(position) => Some(position),
                None => {
                    return Err(WorkloadError::FioBadValue {
                        job: jobs[index].name.clone(),
                        option: "wait_for".into(),
                        value: target.clone(),
                        expected: "the name of a job written before this one".into(),
                    });
                }
            },
            None => None,
        };
        if index > 0 {
            let previous = &jobs[index - 1];
            let new_set = previous.serial_set != jobs[index].serial_set;
            let current: Vec<usize> = (0..index).filter(|&i| jobs[i].wave == wave).collect();
            let waits_in_wave = target.is_some_and(|t| jobs[t].wave == wave);
            if new_set {
                wave += 1;
            } else if waits_in_wave {
                if current.len() != 1 {
                    return Err(unsupported(
                        &jobs[index].name,
                        "wait_for",
                        format!(
                            "{:?} runs at the same time as other jobs; a job that starts when one of several \
                             running jobs ends is not implemented: use stonewall to wait for all of them",
                            wait_for.unwrap_or_default()
                        ),
                    ));
                }
                wave += 1;
            }
        }
        jobs[index].wave = wave;
    }
    Ok(())
}

/// The engine jobs of one wave (jobs that run at the same time): the clones of the first job
/// take the first CPUs it may use, the next job's the next ones, and so on; clones that
/// outnumber the CPUs share them, the least loaded first, and run there by turns. Jobs must be
/// given in order and all belong to one wave.
pub fn wave_specs(jobs: &[FioJob], devices: &[DeviceInfo], online_cpus: &[u32]) -> Result<Vec<JobSpec>, WorkloadError> {
    let mut load = alloc::collections::BTreeMap::new();
    jobs.iter()
        .map(|job| job.to_spec_beside(devices, online_cpus, &mut load))
        .collect()
}

impl FioRun {
    /// The jobs cut into waves, in order (see the `fio` module's docs).
    pub fn waves(&self) -> Vec<&[FioJob]> {
        let mut out = Vec::new();
        let mut start = 0;
        for index in 1..=self.jobs.len() {
            if index == self.jobs.len() || self.jobs[index].wave != self.jobs[start].wave {
                out.push(&self.jobs[start..index]);
                start = index;
            }
        }
        out
    }
}
