//! Checking a [`JobSpec`] against a block device and the online CPUs, and splitting its region
//! between the submitting CPUs.
//!
//! # Regions and CPUs
//!
//! The job's region is `[offset, offset + size)` on the device, cut into blocks of `bs` bytes aligned
//! to `bs`. Each submitting CPU owns a contiguous, disjoint slice of those blocks (the first
//! `blocks % cpus` CPUs get one extra block), so CPUs never touch the same block and need no shared
//! state. Without `runtime`, each CPU issues as many I/Os as its slice has blocks (the job moves `size`
//! bytes in all); with `runtime`, CPUs keep going, wrapping around their slice, until the time is up.
//!
//! # Verify schemes
//!
//! * Read-only jobs (`rw=read|randread`) expect every block to carry `verify_generation` (default 1):
//!   this is the check of a disk written in an earlier boot.
//! * `rw=write` without `runtime` writes each block exactly once (generation 1), so no tracking is
//!   needed; the verify pass then reads the whole region back expecting generation 1.
//! * Any other writing job (random writes, a mix, or a time-based sequential job that wraps) keeps one
//!   u32 per block on each CPU (allocated when the CPU starts, at most [`MAX_TRACKED_BLOCKS_PER_CPU`]):
//!   the block's current generation plus an in-flight bit, so a block is never in flight twice and
//!   each read knows exactly what it must find. Reads of blocks not yet written in this job are not
//!   checked (counted as unchecked); the verify pass reads back every block written.

use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;

use crate::error::WorkloadError;
use crate::job::{CpuSelection, ExpectedGeneration, JobSpec, RwMode, VerifyMode};
use crate::values::CpuSet;

mod files;
pub use files::{FileRoute, PlanFile, route_file};

/// Limit on blocks one CPU tracks for a verify job with random or repeated writes (16 MiB of tracking).
pub const MAX_TRACKED_BLOCKS_PER_CPU: u64 = 1 << 22;

/// What the kernel knows about a block device. All fields are checked by [`plan_job`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Name used by `device=` (e.g. `md0`, `null0`).
    pub name: String,
    /// Logical sector size in bytes: a power of two from 512 to 65536.
    pub sector_size: u32,
    /// Capacity in sectors.
    pub capacity_sectors: u64,
    /// Most requests one CPU may keep in flight (at least 1).
    pub max_iodepth: u32,
    /// Largest transfer in bytes (at least one sector).
    pub max_transfer_bytes: u32,
}

impl DeviceInfo {
    /// Capacity in bytes, or an error when the fields are inconsistent.
    pub fn validated_capacity_bytes(&self) -> Result<u64, WorkloadError> {
        let invalid = |field, value: u64, requirement| WorkloadError::InvalidDevice {
            device: self.name.clone(),
            field,
            value,
            requirement,
        };
        if !self.sector_size.is_power_of_two() || !(512..=65536).contains(&self.sector_size) {
            return Err(invalid(
                "sector_size",
                u64::from(self.sector_size),
                "a power of two from 512 to 65536",
            ));
        }
        if self.capacity_sectors == 0 {
            return Err(invalid("capacity_sectors", 0, "above zero"));
        }
        if self.max_iodepth == 0 {
            return Err(invalid("max_iodepth", 0, "at least 1"));
        }
        if self.max_transfer_bytes < self.sector_size {
            return Err(invalid(
                "max_transfer_bytes",
                u64::from(self.max_transfer_bytes),
                "at least one sector",
            ));
        }
        self.capacity_sectors
            .checked_mul(u64::from(self.sector_size))
            .ok_or_else(|| {
                invalid(
                    "capacity_sectors",
                    self.capacity_sectors,
                    "small enough that the byte capacity fits in 64 bits",
                )
            })
    }
}

/// A warning the kernel should print before running the job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlanWarning {
    /// `iodepth` was above the device's limit and has been lowered to it.
    IodepthCapped {
        /// The job.
        job: String,
        /// The device.
        device: String,
        /// The iodepth asked for.
        requested: u32,
        /// The iodepth used.
        limit: u32,
    },
}

impl fmt::Display for PlanWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::IodepthCapped {
                job,
                device,
                requested,
                limit,
            } => write!(
                f,
                "job {job:?}: iodepth={requested} is above the limit of {device:?}; capped to {limit}"
            ),
        }
    }
}

/// How reads are checked and writes stamped (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VerifyScheme {
    /// No verification.
    Off,
    /// Read-only job: every block must carry this generation.
    ReadOnly(ExpectedGeneration),
    /// One sequential write pass: every block gets generation 1.
    SinglePass,
    /// Per-block generation tracking on each CPU.
    Tracked,
}

impl VerifyScheme {
    /// Whether a verify pass follows the main phase (the job wrote stamped blocks).
    pub fn has_verify_pass(self) -> bool {
        matches!(self, Self::SinglePass | Self::Tracked)
    }
}

/// The blocks one submitting CPU owns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuSlice {
    /// The CPU number.
    pub cpu: u32,
    /// First block of the slice, counted from the start of the region.
    pub first_block: u64,
    /// Number of blocks in the slice (at least 1).
    pub blocks: u64,
}

/// A job checked against a device, ready to run on each of its CPUs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobPlan {
    /// The job as parsed.
    pub spec: JobSpec,
    /// The device it runs on.
    pub device: DeviceInfo,
    /// Requests in flight per CPU, after capping to the device limit.
    pub iodepth: u32,
    /// Region start in bytes.
    pub region_offset: u64,
    /// Region length in bytes (a whole number of blocks).
    pub region_bytes: u64,
    /// Sectors per block (`bs / sector_size`).
    pub sectors_per_block: u32,
    /// The submitting CPUs with their slices, one per clone in clone order (ascending CPUs
    /// unless clones outnumber their CPUs: a CPU then appears once per clone it runs).
    pub cpus: Vec<CpuSlice>,
    /// How verification works for this job.
    pub verify: VerifyScheme,
    /// Warnings to print before the job runs.
    pub warnings: Vec<PlanWarning>,
    /// A job over a `filename` list (see [`files`]): its files, in order; empty for a job on
    /// the one `device`.
    pub files: Vec<PlanFile>,
}

impl JobPlan {
    /// First sector of the region.
    pub fn region_start_sector(&self) -> u64 {
        self.region_offset / u64::from(self.device.sector_size)
    }

    /// Block size in bytes: every I/O's size, or with variable sizes (`JobSpec::bs_mix`) the
    /// unit they are multiples of.
    pub fn bs(&self) -> u32 {
        self.spec.bs
    }

    /// The largest I/O in bytes (what a slot buffer must hold): `bs`, or with variable sizes the
    /// largest of them.
    pub fn max_io_bytes(&self) -> u32 {
        // The largest size is at most MAX_BS, which fits in u32.
        self.spec.bs * self.spec.bs_mix.as_ref().map_or(1, |mix| mix.max_units())
    }

    /// The submitting CPUs as a set.
    pub fn cpu_set(&self) -> CpuSet {
        let mut set = CpuSet::new();
        for slice in &self.cpus {
            set.insert(slice.cpu);
        }
        set
    }
}

/// What variable block sizes (`JobSpec::bs_mix`) do not combine with. Verify: every unit block
/// carries its own stamp, so a sequential write checked by its verify pass and reads of a disk
/// stamped every unit work; the generation tracking of random or mixed writes and the backlog's
/// reads are per block and I/O. Trims: the size draw knows reads and writes only.
fn check_variable_sizes(spec: &JobSpec, verify: VerifyScheme) -> Result<(), WorkloadError> {
    if spec.bs_mix.is_none() {
        return Ok(());
    }
    let refuse = |option: &str, reason: &str| {
        Err(WorkloadError::FioUnsupported {
            job: spec.name.clone(),
            option: option.into(),
            reason: reason.into(),
        })
    };
    if verify == VerifyScheme::Tracked {
        return refuse(
            "verify",
            "verify with variable block sizes is implemented for sequential writes (rw=write, size-bound) and reads; \
             random or mixed writes would need a generation per block across I/Os of several blocks",
        );
    }
    if spec.verify_backlog != 0 {
        return refuse(
            "verify_backlog",
            "the backlog reads blocks of one size; not implemented with variable block sizes",
        );
    }
    if spec.rw.trims() {
        return refuse(
            "bssplit",
            "variable block sizes with trims are not implemented (the trim direction draws one size); \
             give the trim job one bs",
        );
    }
    Ok(())
}

/// fio's `verify_interval` (verify jobs): whole sectors of the device, at least one, dividing
/// the unit block, so every verify unit has a first sector of its own to stamp; not with fio's
/// headerless `verify=pattern`, whose pattern runs on across the whole block.
pub(crate) fn check_verify_interval(spec: &JobSpec, sector: u64) -> Result<(), WorkloadError> {
    let interval = u64::from(spec.verify_interval);
    if interval == 0 || !spec.verify.is_enabled() {
        return Ok(());
    }
    let bs = u64::from(spec.bs);
    let refuse = |reason: String| {
        Err(WorkloadError::FioUnsupported {
            job: spec.name.clone(),
            option: "verify_interval".into(),
            reason,
        })
    };
    if spec.verify == VerifyMode::FioPattern {
        return refuse(
            "verify=pattern has no header: its pattern runs on across the whole block, so there is nothing to \
             stamp every verify_interval bytes; leave verify_interval out"
                .into(),
        );
    }
    if interval < sector || !interval.is_multiple_of(sector) || interval > bs || !bs.is_multiple_of(interval) {
        return refuse(alloc::format!(
            "verify_interval={interval} must be a whole number of the device's {sector}-byte sectors that divides \
             bs ({bs}): each verify unit is stamped with its own first sector"
        ));
    }
    Ok(())
}

/// What a job that trims does not combine with.
fn check_trims(spec: &JobSpec) -> Result<(), WorkloadError> {
    if spec.rw.trims() {
        let refuse = |first, reason| WorkloadError::ConflictingKeys {
            job: spec.name.clone(),
            first,
            second: "rw",
            reason,
        };
        if spec.verify.is_enabled() {
            return Err(refuse(
                "verify",
                "verifying a job that trims is not implemented (a trimmed block's contents are the device's choice)",
            ));
        }
        if spec.io_interval_ns != [0, 0] {
            return Err(refuse("rate", "pacing a job that trims is not implemented"));
        }
    }
    Ok(())
}

/// The job's submitting CPUs, one per clone in clone order (a CPU appears once per clone it
/// runs), all online and at least one.
fn submitting_cpus(spec: &JobSpec, online_cpus: &[u32]) -> Result<Vec<u32>, WorkloadError> {
    let online = CpuSet::from_cpus(online_cpus);
    let cpus: Vec<u32> = match &spec.cpus {
        CpuSelection::All => online.iter().collect(),
        CpuSelection::List(list) => list.iter().collect(),
        CpuSelection::Clones(cpus) => cpus.clone(),
    };
    if let Some(&cpu) = cpus.iter().find(|&&cpu| !online.contains(cpu)) {
        return Err(WorkloadError::CpuNotOnline {
            job: spec.name.clone(),
            cpu,
            online: online.to_string(),
        });
    }
    if cpus.is_empty() {
        return Err(WorkloadError::NoCpus { job: spec.name.clone() });
    }
    Ok(cpus)
}

/// Checks `spec` against the devices and the online CPUs, and plans it. Errors name the job and the
/// exact problem; an `iodepth` above the device limit is capped, with a warning in the plan.
pub fn plan_job(spec: &JobSpec, devices: &[DeviceInfo], online_cpus: &[u32]) -> Result<JobPlan, WorkloadError> {
    if !spec.files.is_empty() {
        return crate::plan::files::plan_files(spec, devices, online_cpus);
    }
    let job = || spec.name.clone();
    let device_names = || devices.iter().map(|d| d.name.as_str()).collect::<Vec<_>>().join(", ");
    let device = match &spec.device {
        Some(name) => devices
            .iter()
            .find(|d| &d.name == name)
            .ok_or_else(|| WorkloadError::UnknownDevice {
                job: job(),
                device: name.clone(),
                available: device_names(),
            })?,
        None if devices.len() == 1 => &devices[0],
        None => {
            return Err(WorkloadError::MissingDevice {
                job: job(),
                available: device_names(),
            });
        }
    };
    let capacity = device.validated_capacity_bytes()?;
    check_trims(spec)?;
    let cpus = submitting_cpus(spec, online_cpus)?;

    let bs = u64::from(spec.bs);
    let sector = u64::from(device.sector_size);
    check_aligned(spec, "bs", bs, sector, "the device sector size")?;
    // A `bs` above the device's transfer limit is fine: the block layer splits each I/O into
    // device-sized requests and ends it when all of them have (kernel/blk, `split`).
    check_aligned(spec, "offset", spec.offset, bs, "blocks are aligned to bs")?;
    let too_large = |end_bytes| WorkloadError::JobLargerThanDevice {
        job: job(),
        device: device.name.clone(),
        end_bytes,
        capacity_bytes: capacity,
    };
    let region_bytes = match spec.size {
        Some(size) => {
            check_aligned(spec, "size", size, bs, "the region is a whole number of blocks")?;
            let end = spec.offset.checked_add(size).ok_or_else(|| too_large(u64::MAX))?;
            if end > capacity {
                return Err(too_large(end));
            }
            size
        }
        None => {
            if spec.offset >= capacity {
                return Err(too_large(spec.offset));
            }
            // The default region runs to the last whole block of the device.
            (capacity - spec.offset) / bs * bs
        }
    };
    let blocks = region_bytes / bs;
    let cpu_count = cpus.len() as u32;
    if let Some(increment) = spec.clone_increment {
        return plan_clones(spec, device, capacity, cpus, region_bytes, increment);
    }
    if blocks < u64::from(cpu_count) {
        return Err(WorkloadError::RegionTooSmall {
            job: job(),
            blocks,
            cpus: cpu_count,
        });
    }

    let base = blocks / u64::from(cpu_count);
    let extra = blocks % u64::from(cpu_count);
    let mut slices = Vec::with_capacity(cpu_count as usize);
    let mut first_block = 0;
    for (index, &cpu) in cpus.iter().enumerate() {
        let len = base + u64::from((index as u64) < extra);
        slices.push(CpuSlice {
            cpu,
            first_block,
            blocks: len,
        });
        first_block += len;
    }

    let verify = verify_scheme(spec, false, base, base + u64::from(extra > 0))?;
    check_variable_sizes(spec, verify)?;
    check_verify_interval(spec, sector)?;

    let (iodepth, warnings) = capped_iodepth(spec, device);
    Ok(JobPlan {
        spec: spec.clone(),
        device: device.clone(),
        iodepth,
        region_offset: spec.offset,
        region_bytes,
        // bs / sector <= 16 MiB / 512, which fits in u32.
        sectors_per_block: (bs / sector) as u32,
        cpus: slices,
        verify,
        warnings,
        files: Vec::new(),
    })
}

/// `value` (option `key` of the job) must be a multiple of `alignment`, `because` says why.
pub(crate) fn check_aligned(
    spec: &JobSpec,
    key: &'static str,
    value: u64,
    alignment: u64,
    because: &'static str,
) -> Result<(), WorkloadError> {
    if value.is_multiple_of(alignment) {
        return Ok(());
    }
    Err(WorkloadError::Misaligned {
        job: spec.name.clone(),
        key,
        value,
        alignment,
        because,
    })
}

/// The `clones` regions of `size` bytes from `offset`, each shifted by `increment` from the one
/// before (fio's `numjobs` with `offset_increment`), must end within `device`'s `capacity`.
/// Returns where the last one ends, in bytes.
pub(crate) fn check_clones_fit(
    spec: &JobSpec,
    device: &DeviceInfo,
    capacity: u64,
    clones: u64,
    increment: u64,
    size: u64,
    offset: u64,
) -> Result<u64, WorkloadError> {
    let end = (clones - 1)
        .checked_mul(increment)
        .and_then(|shift| shift.checked_add(size))
        .and_then(|span| span.checked_add(offset))
        .unwrap_or(u64::MAX);
    if end > capacity {
        return Err(WorkloadError::JobLargerThanDevice {
            job: spec.name.clone(),
            device: device.name.clone(),
            end_bytes: end,
            capacity_bytes: capacity,
        });
    }
    Ok(end)
}

/// How a job's reads are checked and its writes stamped: off; read-only (every block carries the
/// job's generation); one sequential write pass (when it writes each of its `pass_blocks` once);
/// or per-block generations over `tracked_blocks` per CPU (at most
/// [`MAX_TRACKED_BLOCKS_PER_CPU`]). `overlapping`: clones whose regions overlap, which cannot both
/// write and verify. One device, a split region and a `filename` list all decide it here.
pub(crate) fn verify_scheme(
    spec: &JobSpec,
    overlapping: bool,
    pass_blocks: u64,
    tracked_blocks: u64,
) -> Result<VerifyScheme, WorkloadError> {
    if !spec.verify.is_enabled() {
        Ok(VerifyScheme::Off)
    } else if !spec.rw.writes() {
        Ok(VerifyScheme::ReadOnly(spec.verify_generation))
    } else if overlapping {
        Err(WorkloadError::ConflictingKeys {
            job: spec.name.clone(),
            first: "numjobs",
            second: "verify",
            reason: "clones that write and verify need regions of their own: set offset_increment to at least size",
        })
    } else if spec.rw == RwMode::Write
        && !spec.is_time_based()
        && spec.ios_per_cpu.is_none_or(|n| n <= pass_blocks)
        && spec.offset_add_blocks == 0
    {
        // One pass over every block in order; a walk with an offset modifier (holes, a
        // backwards start, repeated passes) is tracked block by block instead.
        Ok(VerifyScheme::SinglePass)
    } else if tracked_blocks > MAX_TRACKED_BLOCKS_PER_CPU {
        Err(WorkloadError::VerifyRegionTooLarge {
            job: spec.name.clone(),
            blocks_per_cpu: tracked_blocks,
            max: MAX_TRACKED_BLOCKS_PER_CPU,
        })
    } else {
        Ok(VerifyScheme::Tracked)
    }
}

/// The job's `iodepth` lowered to the device's limit, with the warning when it was.
fn capped_iodepth(spec: &JobSpec, device: &DeviceInfo) -> (u32, Vec<PlanWarning>) {
    let mut warnings = Vec::new();
    let iodepth = spec.iodepth.min(device.max_iodepth);
    if iodepth < spec.iodepth {
        warnings.push(PlanWarning::IodepthCapped {
            job: spec.name.clone(),
            device: device.name.clone(),
            requested: spec.iodepth,
            limit: iodepth,
        });
    }
    (iodepth, warnings)
}

/// fio's `numjobs` clones: every CPU gets the whole `size` region, CPU `i`'s shifted by
/// `i * increment` bytes (`offset_increment`). Overlapping clones cannot track verify generations
/// per CPU, so a verify job needs disjoint clones.
fn plan_clones(
    spec: &JobSpec,
    device: &DeviceInfo,
    capacity: u64,
    cpus: Vec<u32>,
    region_bytes: u64,
    increment: u64,
) -> Result<JobPlan, WorkloadError> {
    let job = || spec.name.clone();
    let bs = u64::from(spec.bs);
    check_aligned(spec, "offset_increment", increment, bs, "blocks are aligned to bs")?;
    let clones = cpus.len() as u64;
    let span = check_clones_fit(spec, device, capacity, clones, increment, region_bytes, spec.offset)?;
    let blocks = region_bytes / bs;
    if blocks == 0 {
        return Err(WorkloadError::RegionTooSmall {
            job: job(),
            blocks,
            cpus: 1,
        });
    }
    let slices = cpus
        .iter()
        .enumerate()
        .map(|(index, &cpu)| CpuSlice {
            cpu,
            first_block: index as u64 * (increment / bs),
            blocks,
        })
        .collect::<Vec<_>>();
    let overlapping = clones > 1 && increment < region_bytes;
    let verify = verify_scheme(spec, overlapping, blocks, blocks)?;
    check_variable_sizes(spec, verify)?;
    check_verify_interval(spec, u64::from(device.sector_size))?;
    let (iodepth, warnings) = capped_iodepth(spec, device);
    Ok(JobPlan {
        spec: spec.clone(),
        device: device.clone(),
        iodepth,
        region_offset: spec.offset,
        region_bytes: span - spec.offset,
        // bs / sector <= 16 MiB / 512, which fits in u32.
        sectors_per_block: (bs / u64::from(device.sector_size)) as u32,
        cpus: slices,
        verify,
        warnings,
        files: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::parse_jobs;
    use alloc::vec;

    fn md0() -> DeviceInfo {
        DeviceInfo {
            name: "md0".into(),
            sector_size: 512,
            capacity_sectors: 2048 * 64, // 64 MiB
            max_iodepth: 32,
            max_transfer_bytes: 1 << 20,
        }
    }

    fn null0() -> DeviceInfo {
        DeviceInfo {
            name: "null0".into(),
            sector_size: 4096,
            capacity_sectors: 1 << 20,
            ..md0()
        }
    }

    fn plan(words: &str) -> Result<JobPlan, WorkloadError> {
        let jobs = parse_jobs(words.split_ascii_whitespace()).unwrap();
        plan_job(&jobs[0], &[md0(), null0()], &[0, 1, 2, 3])
    }

    #[test]
    fn region_is_split_into_disjoint_slices_covering_it() {
        let p = plan("device=md0 bs=4k size=40k offset=8k cpus=0,2,3").unwrap();
        assert_eq!(p.region_start_sector(), 16);
        assert_eq!(p.sectors_per_block, 8);
        assert_eq!(
            p.cpus,
            vec![
                CpuSlice {
                    cpu: 0,
                    first_block: 0,
                    blocks: 4
                },
                CpuSlice {
                    cpu: 2,
                    first_block: 4,
                    blocks: 3
                },
                CpuSlice {
                    cpu: 3,
                    first_block: 7,
                    blocks: 3
                },
            ]
        );
        assert_eq!(p.verify, VerifyScheme::Off);
        assert!(p.warnings.is_empty());
    }

    #[test]
    fn default_region_runs_to_the_end_of_the_device() {
        let p = plan("device=md0 bs=3k offset=3k cpus=0").unwrap();
        assert_eq!(p.region_bytes, (64 * 1024 * 1024 - 3072) / 3072 * 3072);
        assert_eq!(p.cpus.len(), 1);
        let all = plan("device=md0").unwrap();
        assert_eq!(all.cpus.iter().map(|s| s.cpu).collect::<Vec<_>>(), [0, 1, 2, 3]);
    }

    #[test]
    fn job_larger_than_device_is_rejected() {
        let err = plan("device=md0 size=64m offset=4k").unwrap_err();
        assert_eq!(
            err,
            WorkloadError::JobLargerThanDevice {
                job: "job0".into(),
                device: "md0".into(),
                end_bytes: (64 << 20) + 4096,
                capacity_bytes: 64 << 20
            }
        );
        assert!(matches!(
            plan("device=md0 offset=64m").unwrap_err(),
            WorkloadError::JobLargerThanDevice { .. }
        ));
        assert!(matches!(
            plan("device=md0 offset=16t size=16t").unwrap_err(),
            WorkloadError::JobLargerThanDevice { .. }
        ));
        assert!(plan("device=md0 size=64m").is_ok());
    }

    #[test]
    fn iodepth_above_device_limit_is_capped_with_a_warning() {
        let p = plan("device=md0 iodepth=100").unwrap();
        assert_eq!(p.iodepth, 32);
        assert_eq!(
            p.warnings,
            vec![PlanWarning::IodepthCapped {
                job: "job0".into(),
                device: "md0".into(),
                requested: 100,
                limit: 32
            }]
        );
        assert!(p.warnings[0].to_string().contains("capped to 32"));
    }

    #[test]
    fn alignment_errors_name_key_and_reason() {
        let err = plan("device=null0 bs=512").unwrap_err();
        assert!(
            matches!(
                err,
                WorkloadError::Misaligned {
                    key: "bs",
                    value: 512,
                    alignment: 4096,
                    ..
                }
            ),
            "{err:?}"
        );
        let err = plan("device=md0 bs=4k offset=512").unwrap_err();
        assert!(
            matches!(
                err,
                WorkloadError::Misaligned {
                    key: "offset",
                    value: 512,
                    alignment: 4096,
                    ..
                }
            ),
            "{err:?}"
        );
        let err = plan("device=md0 bs=4k size=6k").unwrap_err();
        assert!(matches!(err, WorkloadError::Misaligned { key: "size", .. }), "{err:?}");
        // Above the device's 1 MiB transfer limit: planned as asked (blk splits each I/O).
        let planned = plan("device=md0 bs=2m size=8m").unwrap();
        assert_eq!((planned.bs(), planned.device.max_transfer_bytes), (2 << 20, 1 << 20));
    }

    #[test]
    fn device_and_cpu_selection_errors() {
        let jobs = parse_jobs(["rw=read"]).unwrap();
        let err = plan_job(&jobs[0], &[md0(), null0()], &[0]).unwrap_err();
        assert_eq!(
            err,
            WorkloadError::MissingDevice {
                job: "job0".into(),
                available: "md0, null0".into()
            }
        );
        assert!(err.to_string().contains("device= is required"));
        assert_eq!(plan_job(&jobs[0], &[null0()], &[0]).unwrap().device.name, "null0");
        assert!(matches!(
            plan_job(&jobs[0], &[], &[0]).unwrap_err(),
            WorkloadError::MissingDevice { .. }
        ));
        assert!(matches!(
            plan("device=sda").unwrap_err(),
            WorkloadError::UnknownDevice { .. }
        ));
        assert_eq!(
            plan("device=md0 cpus=1,7").unwrap_err(),
            WorkloadError::CpuNotOnline {
                job: "job0".into(),
                cpu: 7,
                online: "0-3".into()
            }
        );
        assert_eq!(
            plan_job(&jobs[0], &[null0()], &[]).unwrap_err(),
            WorkloadError::NoCpus { job: "job0".into() }
        );
        let err = plan("device=md0 bs=4k size=12k").unwrap_err();
        assert_eq!(
            err,
            WorkloadError::RegionTooSmall {
                job: "job0".into(),
                blocks: 3,
                cpus: 4
            }
        );
    }

    #[test]
    fn malformed_device_descriptions_are_errors_not_panics() {
        let jobs = parse_jobs(["rw=read"]).unwrap();
        let bad = [
            DeviceInfo {
                sector_size: 0,
                ..md0()
            },
            DeviceInfo {
                sector_size: 520,
                ..md0()
            },
            DeviceInfo {
                sector_size: 1 << 20,
                ..md0()
            },
            DeviceInfo {
                capacity_sectors: 0,
                ..md0()
            },
            DeviceInfo {
                capacity_sectors: u64::MAX,
                ..md0()
            },
            DeviceInfo {
                max_iodepth: 0,
                ..md0()
            },
            DeviceInfo {
                max_transfer_bytes: 100,
                ..md0()
            },
        ];
        for device in bad {
            let err = plan_job(&jobs[0], core::slice::from_ref(&device), &[0]).unwrap_err();
            assert!(
                matches!(err, WorkloadError::InvalidDevice { .. }),
                "{device:?}: {err:?}"
            );
        }
    }

    #[test]
    fn verify_scheme_follows_the_access_pattern() {
        let scheme = |words: &str| plan(words).unwrap().verify;
        assert_eq!(
            scheme("device=md0 rw=read verify=crc32c"),
            VerifyScheme::ReadOnly(ExpectedGeneration::Exact(1))
        );
        assert_eq!(
            scheme("device=md0 rw=randread verify=pattern verify_generation=any"),
            VerifyScheme::ReadOnly(ExpectedGeneration::Any)
        );
        assert_eq!(scheme("device=md0 rw=write verify=crc32c"), VerifyScheme::SinglePass);
        assert_eq!(
            scheme("device=md0 rw=write verify=crc32c runtime=1s"),
            VerifyScheme::Tracked
        );
        assert_eq!(scheme("device=md0 rw=randrw verify=crc32c"), VerifyScheme::Tracked);
        let big = DeviceInfo {
            capacity_sectors: 1 << 40,
            ..md0()
        };
        let jobs = parse_jobs("rw=randwrite verify=crc32c bs=512 cpus=0".split(' ')).unwrap();
        let err = plan_job(&jobs[0], core::slice::from_ref(&big), &[0]).unwrap_err();
        assert!(matches!(err, WorkloadError::VerifyRegionTooLarge { .. }), "{err:?}");
        // One sequential pass over the same huge region needs no tracking.
        let jobs = parse_jobs("rw=write verify=crc32c bs=512 cpus=0".split(' ')).unwrap();
        assert_eq!(
            plan_job(&jobs[0], &[big], &[0]).unwrap().verify,
            VerifyScheme::SinglePass
        );
    }
}
