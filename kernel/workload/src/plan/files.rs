//! Planning a job over a `filename` list (fio's several files per job, one device each).
//!
//! # One address space for several devices
//!
//! The engine drives one slice of blocks per CPU and addresses block `b` at sector
//! `first_lba + b * sectors_per_block`. A job over files lays its files' regions end to end in
//! each CPU's slice (file `f` from slice block [`PlanFile::first_block`], as fio's clones shift
//! every file by `offset_increment`), so the engine runs unchanged on a joined address space, and
//! the CPU's backend routes each request to its device: [`JobPlan::file_routes`] gives, per file,
//! where its part of the joined space ends and what to add to reach the device's sector
//! ([`route_file`]). The first file's sectors are the device's own; verify stamps carry the
//! joined sector, so a later job that checks them needs the same `filename` list and sizes.
//!
//! All files must have one sector size (a request's sector count is the same on every device);
//! a device may appear once in the list.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use super::{
    DeviceInfo, JobPlan, PlanWarning, check_aligned, check_clones_fit, check_trims, check_variable_sizes,
    submitting_cpus,
};
use crate::error::WorkloadError;
use crate::job::{JobSpec, RwMode};

/// One file of a planned job over a `filename` list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanFile {
    /// The device.
    pub device: DeviceInfo,
    /// The region's start in bytes for the first clone (clone `i`'s is `i * clone_increment`
    /// further).
    pub offset: u64,
    /// The file's first block in every CPU's slice.
    pub first_block: u64,
    /// The region's length in blocks.
    pub blocks: u64,
}

/// Where one file's part of a CPU's joined address space ends, and how to reach the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileRoute {
    /// First joined sector past the file's part.
    pub end_lba: u64,
    /// Added (wrapping) to a joined sector of the file, it gives the device's sector.
    pub delta: u64,
}

/// The file (index into `routes`) that joined sector `lba` belongs to, and the device's sector.
/// `routes` are one CPU's ([`JobPlan::file_routes`]), in file order.
#[inline]
pub fn route_file(routes: &[FileRoute], lba: u64) -> (usize, u64) {
    let mut file = 0;
    while file + 1 < routes.len() && lba >= routes[file].end_lba {
        file += 1;
    }
    (file, lba.wrapping_add(routes[file].delta))
}

impl JobPlan {
    /// The routes of CPU `cpu_index` (an index into `cpus`) of a job over files, one per file
    /// (empty for a job on one device).
    pub fn file_routes(&self, cpu_index: usize) -> Vec<FileRoute> {
        let spb = u64::from(self.sectors_per_block);
        let sector = u64::from(self.device.sector_size);
        let slice_start = self.region_start_sector() + self.cpus[cpu_index].first_block * spb;
        self.files
            .iter()
            .map(|file| FileRoute {
                end_lba: slice_start + (file.first_block + file.blocks) * spb,
                // joined = region start + (slice start + block) * spb; device = file offset +
                // (slice start + block - file's first block) * spb.
                delta: (file.offset / sector)
                    .wrapping_sub(self.region_start_sector())
                    .wrapping_sub(file.first_block * spb),
            })
            .collect()
    }

    /// The devices the job runs on: its files' devices, or its one device.
    pub fn devices(&self) -> Vec<&DeviceInfo> {
        if self.files.is_empty() {
            alloc::vec![&self.device]
        } else {
            self.files.iter().map(|f| &f.device).collect()
        }
    }
}

fn refuse(spec: &JobSpec, detail: String) -> WorkloadError {
    WorkloadError::FileList {
        job: spec.name.clone(),
        detail,
    }
}

/// [`plan_job`](super::plan_job) for a job with [`JobSpec::files`].
pub(super) fn plan_files(
    spec: &JobSpec,
    devices: &[DeviceInfo],
    online_cpus: &[u32],
) -> Result<JobPlan, WorkloadError> {
    let job = || spec.name.clone();
    let available = || devices.iter().map(|d| d.name.as_str()).collect::<Vec<_>>().join(", ");
    let Some(increment) = spec.clone_increment else {
        return Err(refuse(
            spec,
            "a job over several devices is a fio job (its clones each cover every file)".into(),
        ));
    };
    if spec.bs_mix.is_some() {
        return Err(refuse(
            spec,
            "variable block sizes (bssplit, bsrange, bs=R,W) over several files are not implemented; give one bs"
                .into(),
        ));
    }
    if matches!(spec.rw, RwMode::TrimWrite | RwMode::RandTrimWrite) {
        return Err(refuse(
            spec,
            format!(
                "rw={} over several files is not implemented (a block's trim and write must go to one file)",
                spec.rw.as_str()
            ),
        ));
    }
    if spec.end_flush {
        return Err(refuse(
            spec,
            "end_fsync (or fsync_on_close) over several files is not implemented: the job's one closing flush \
             would reach one device; fsync=N flushes the file just written and works"
                .into(),
        ));
    }
    check_trims(spec)?;
    let cpus = submitting_cpus(spec, online_cpus)?;
    let mut found: Vec<&DeviceInfo> = Vec::with_capacity(spec.files.len());
    for file in &spec.files {
        let device = devices
            .iter()
            .find(|d| d.name == file.device)
            .ok_or_else(|| WorkloadError::UnknownDevice {
                job: job(),
                device: file.device.clone(),
                available: available(),
            })?;
        device.validated_capacity_bytes()?;
        if found.iter().any(|d| d.name == device.name) {
            return Err(refuse(
                spec,
                format!(
                    "/dev/{} is listed twice; fio would run two independent files over the same blocks, which \
                     baremq does not (list each device once)",
                    device.name
                ),
            ));
        }
        if let Some(first) = found.first()
            && first.sector_size != device.sector_size
        {
            return Err(refuse(
                spec,
                format!(
                    "/dev/{} has {}-byte sectors and /dev/{} {}-byte ones; one job's files must share a sector \
                     size (run one job per device instead)",
                    first.name, first.sector_size, device.name, device.sector_size
                ),
            ));
        }
        found.push(device);
    }
    let sector = u64::from(found[0].sector_size);
    let bs = u64::from(spec.bs);
    check_aligned(spec, "bs", bs, sector, "the device sector size")?;
    check_aligned(spec, "offset_increment", increment, bs, "blocks are aligned to bs")?;
    let clones = cpus.len() as u64;
    let mut files = Vec::with_capacity(found.len());
    let mut first_block = 0u64;
    let mut overlapping = false;
    for (file, device) in spec.files.iter().zip(&found) {
        for (key, value) in [("offset", file.offset), ("size", file.size)] {
            check_aligned(spec, key, value, bs, "each file's region is a whole number of blocks")?;
        }
        if file.size == 0 {
            return Err(WorkloadError::RegionTooSmall {
                job: job(),
                blocks: 0,
                cpus: 1,
            });
        }
        let capacity = device.validated_capacity_bytes()?;
        check_clones_fit(spec, device, capacity, clones, increment, file.size, file.offset)?;
        overlapping |= clones > 1 && increment < file.size;
        let blocks = file.size / bs;
        files.push(PlanFile {
            device: (*device).clone(),
            offset: file.offset,
            first_block,
            blocks,
        });
        first_block += blocks;
    }
    let blocks = first_block;
    let verify = super::verify_scheme(spec, overlapping, blocks, blocks)?;
    check_variable_sizes(spec, verify)?;
    super::check_verify_interval(spec, sector)?;
    // The engine's depth is shared by all files, so the shallowest device bounds it.
    let shallowest = found.iter().min_by_key(|d| d.max_iodepth).copied().unwrap_or(found[0]);
    let iodepth = spec.iodepth.min(shallowest.max_iodepth);
    let mut warnings = Vec::new();
    if iodepth < spec.iodepth {
        warnings.push(PlanWarning::IodepthCapped {
            job: job(),
            device: shallowest.name.clone(),
            requested: spec.iodepth,
            limit: iodepth,
        });
    }
    let slices = cpus
        .iter()
        .enumerate()
        .map(|(index, &cpu)| super::CpuSlice {
            cpu,
            first_block: index as u64 * (increment / bs),
            blocks,
        })
        .collect();
    let mut planned = spec.clone();
    planned.device = Some(found[0].name.clone());
    Ok(JobPlan {
        spec: planned,
        device: found[0].clone(),
        iodepth,
        region_offset: spec.files[0].offset,
        region_bytes: blocks * bs,
        // bs / sector <= 16 MiB / 512, which fits in u32.
        sectors_per_block: (bs / sector) as u32,
        cpus: slices,
        verify,
        warnings,
        files,
    })
}
