//! A job on the machine: its device or devices, the regions on them, and its clones' CPUs.

use alloc::collections::BTreeMap;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use super::{FioJob, Target, unsupported};
use crate::error::WorkloadError;
use crate::job::{FileRegion, JobSpec};
use crate::plan::DeviceInfo;
use crate::values::CpuSet;

impl FioJob {
    /// The device `/dev/NAME` names, or an error listing the devices there are.
    fn named_device<'d>(&self, devices: &'d [DeviceInfo], name: &str) -> Result<&'d DeviceInfo, WorkloadError> {
        devices
            .iter()
            .find(|d| d.name == name)
            .ok_or_else(|| WorkloadError::UnknownDevice {
                job: self.name.clone(),
                device: alloc::format!("/dev/{name}"),
                available: devices.iter().map(|d| d.name.as_str()).collect::<Vec<_>>().join(", "),
            })
    }

    /// A job on one device: names it in `spec` and settles a percentage `offset` and `size` on
    /// its capacity. Returns the region's bytes (twice: it is also the smallest file).
    fn place_on_device(&self, spec: &mut JobSpec, devices: &[DeviceInfo]) -> Result<(u64, u64), WorkloadError> {
        let available = || devices.iter().map(|d| d.name.as_str()).collect::<Vec<_>>().join(", ");
        let device = match &self.target {
            Target::Device(name) => self.named_device(devices, name)?,
            Target::File(_) | Target::Default | Target::Devices(_) => match devices {
                [only] => only,
                _ => {
                    return Err(WorkloadError::MissingDevice {
                        job: self.name.clone(),
                        available: available(),
                    });
                }
            },
        };
        spec.device = Some(device.name.clone());
        let capacity = device.validated_capacity_bytes()?;
        let bs = u64::from(spec.bs);
        if let Some(p) = self.offset_percent {
            spec.offset = capacity / 100 * u64::from(p) / bs * bs;
        }
        if let Some(p) = self.size_percent {
            let room = capacity.saturating_sub(spec.offset);
            spec.size = Some((room / 100 * u64::from(p) / bs * bs).max(bs));
        }
        if let Some(size) = spec.size
            && let Some(capped) = capped_size(spec.offset, size, capacity, bs)
        {
            spec.size = Some(capped);
            spec.placement_notes
                .push(past_the_end_note(&device.name, spec.offset, size, capacity, capped));
        }
        let region = spec.size.unwrap_or_else(|| capacity.saturating_sub(spec.offset));
        Ok((region, region))
    }

    /// The regions of a job over several devices, as fio 3.33 sizes its files
    /// (`filesetup.c`, `setup_files`): `size` in bytes is split evenly between the files (fio
    /// hands what the division leaves out in whole blocks only, so with whole-block shares the
    /// few bytes left go nowhere), `filesize` is each file's; without either each file runs from
    /// `offset` to its end; a percentage `offset` or `size` is of each device.
    fn file_regions(
        &self,
        names: &[String],
        devices: &[DeviceInfo],
        bs: u64,
        notes: &mut Vec<String>,
    ) -> Result<Vec<FileRegion>, WorkloadError> {
        let count = names.len() as u64;
        let share = match self.spec.size {
            Some(each) if self.size_per_file => Some(each),
            Some(total) => {
                let share = total / count;
                if share == 0 || !share.is_multiple_of(bs) {
                    return Err(WorkloadError::FioBadValue {
                        job: self.name.clone(),
                        option: "size".into(),
                        value: total.to_string(),
                        expected: alloc::format!(
                            "a size that splits into whole blocks over the {count} files (fio gives each \
                             size/{count} bytes): a multiple of {} ({count} x bs {bs})",
                            count * bs
                        ),
                    });
                }
                Some(share)
            }
            None => None,
        };
        let mut regions = Vec::with_capacity(names.len());
        for name in names {
            let device = self.named_device(devices, name)?;
            let capacity = device.validated_capacity_bytes()?;
            let offset = match self.offset_percent {
                Some(p) => capacity / 100 * u64::from(p) / bs * bs,
                None => self.spec.offset,
            };
            let size = match (share, self.size_percent) {
                (Some(share), _) => match capped_size(offset, share, capacity, bs) {
                    Some(capped) => {
                        notes.push(past_the_end_note(&device.name, offset, share, capacity, capped));
                        capped
                    }
                    None => share,
                },
                (None, Some(p)) => (capacity.saturating_sub(offset) / 100 * u64::from(p) / bs * bs).max(bs),
                (None, None) => capacity.saturating_sub(offset) / bs * bs,
            };
            if size == 0 {
                return Err(WorkloadError::JobLargerThanDevice {
                    job: self.name.clone(),
                    device: device.name.clone(),
                    end_bytes: offset.saturating_add(bs),
                    capacity_bytes: capacity,
                });
            }
            regions.push(FileRegion {
                device: device.name.clone(),
                offset,
                size,
            });
        }
        Ok(regions)
    }

    /// The engine job for this fio job on these devices and online CPUs: the device from
    /// `filename`, percentages of its capacity, the clones' CPUs (`cpus_allowed`, else the first
    /// `numjobs` online CPUs), and `loops` passes over the region.
    pub fn to_spec(&self, devices: &[DeviceInfo], online_cpus: &[u32]) -> Result<JobSpec, WorkloadError> {
        self.to_spec_beside(devices, online_cpus, &mut BTreeMap::new())
    }

    /// [`FioJob::to_spec`] for a job that runs beside others: `load` counts the clones the jobs
    /// of the same wave already run on each CPU. Each clone takes the least loaded CPU it may
    /// use, the lowest first among equals: with CPUs to spare every clone has one of its own
    /// (the first free ones); clones that outnumber them share CPUs, which run them by turns,
    /// as fio's threads share CPUs. `load` gains this job's clones.
    pub fn to_spec_beside(
        &self,
        devices: &[DeviceInfo],
        online_cpus: &[u32],
        load: &mut BTreeMap<u32, u32>,
    ) -> Result<JobSpec, WorkloadError> {
        if let Some(nodes) = &self.numa_cpu_nodes {
            return Err(unsupported(
                &self.name,
                &alloc::format!("numa_cpu_nodes={nodes}"),
                "the nodes were not resolved to the box's CPUs (workload::fio::place_on_nodes, which the kernel \
                 runs with its SRAT)",
            ));
        }
        let mut spec = self.spec.clone();
        let bs = u64::from(spec.bs);
        // The bytes of one clone's region, and of its smallest file (the one file's region for
        // a job on one device).
        let (region, smallest_file) = if let Target::Devices(names) = &self.target {
            let mut notes = Vec::new();
            spec.files = self.file_regions(names, devices, bs, &mut notes)?;
            spec.placement_notes.extend(notes);
            spec.device = Some(spec.files[0].device.clone());
            (
                spec.files.iter().map(|f| f.size).sum::<u64>(),
                spec.files.iter().map(|f| f.size).min().unwrap_or(0),
            )
        } else {
            self.place_on_device(&mut spec, devices)?
        };
        let online = CpuSet::from_cpus(online_cpus);
        let wanted = self.numjobs;
        let candidates: Vec<u32> = match self.cpus_allowed {
            Some(set) => {
                if let Some(cpu) = set.iter().find(|c| !online.contains(*c)) {
                    return Err(WorkloadError::CpuNotOnline {
                        job: self.name.clone(),
                        cpu,
                        online: online.to_string(),
                    });
                }
                set.iter().collect()
            }
            None => online.iter().collect(),
        };
        let clones = place_clones(wanted, &candidates, load);
        spec.cpus = if clones.windows(2).all(|pair| pair[0] < pair[1]) {
            crate::job::CpuSelection::List(CpuSet::from_cpus(&clones))
        } else {
            crate::job::CpuSelection::Clones(clones)
        };
        spec.report_each_clone = wanted > 1 && !self.report.group_reporting;
        let zoned_bytes: u64 = spec
            .zones
            .iter()
            .map(|z| match z.length {
                crate::job::ZoneLength::Bytes(b) => b,
                crate::job::ZoneLength::Percent(_) => 0,
            })
            .sum();
        if zoned_bytes > smallest_file {
            return Err(WorkloadError::FioBadValue {
                job: self.name.clone(),
                option: "random_distribution".into(),
                value: alloc::format!("zoned_abs zones of {zoned_bytes} bytes"),
                expected: alloc::format!("zones that fit in the job's region of {smallest_file} bytes"),
            });
        }
        if self.loops > 1 || self.ios_per_pass.is_some() {
            let per_pass = self.ios_per_pass.unwrap_or(region / bs);
            spec.ios_per_cpu = Some(per_pass.saturating_mul(self.loops));
        }
        Ok(spec)
    }
}

/// Each of `wanted` clones on the least loaded of `candidates` (the lowest first among equals),
/// counted into `load`; in clone order.
fn place_clones(wanted: u32, candidates: &[u32], load: &mut BTreeMap<u32, u32>) -> Vec<u32> {
    let mut clones = Vec::with_capacity(wanted as usize);
    for _ in 0..wanted {
        let Some(&cpu) = candidates
            .iter()
            .min_by_key(|&&cpu| (load.get(&cpu).copied().unwrap_or(0), cpu))
        else {
            break;
        };
        *load.entry(cpu).or_default() += 1;
        clones.push(cpu);
    }
    clones
}

/// fio's cut of a region that runs past the device's end: a file's I/O stops at its end, so a
/// `size` from `offset` larger than what is left is what is left, in whole blocks. `None`: the
/// region fits, or `offset` itself is at or past the end (refused by the plan, as fio refuses
/// an offset past the end).
fn capped_size(offset: u64, size: u64, capacity: u64, bs: u64) -> Option<u64> {
    let room = capacity.checked_sub(offset)? / bs * bs;
    (offset.saturating_add(size) > capacity && room > 0).then_some(room)
}

fn past_the_end_note(device: &str, offset: u64, size: u64, capacity: u64, capped: u64) -> String {
    alloc::format!(
        "size={size} from offset {offset} runs past the end of {device} ({capacity} bytes): the region is the \
         {capped} bytes to the end, as fio stops a file's I/O there"
    )
}
