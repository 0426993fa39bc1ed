//! What a PCI driver gives the kernel: its name (also the prefix of its
//! command-line keys), match rules, an options parser, a probe function, and
//! the hooks a job may call before it starts (the device floor, interrupt
//! aiming). The table of them is `dev::registry`.

use crate::error::Error;
use alloc::boxed::Box;
use alloc::vec::Vec;
use platform::pci::{DeviceMatch, PciFunction};

/// One job as the device layer sees it before it starts: its name, the devices it uses and the
/// CPUs that submit to them (every clone counted).
#[derive(Debug)]
pub struct JobDevices<'a> {
    pub name: &'a str,
    pub devices: Vec<&'a str>,
    pub cpus: Vec<usize>,
}

/// A job's device-floor figures, as (job-total key, value): IOPS and p50 per queue depth.
pub type FloorFigures = Vec<(&'static str, u64)>;

/// What a driver's interrupt aiming returns: dropping it undoes the aim (after the jobs' reports).
pub type AimGuard = Box<dyn core::any::Any>;

/// One PCI driver.
pub struct PciDriver {
    /// The driver's name, which is also the prefix of its command-line keys.
    pub name: &'static str,
    /// Functions it drives (vendor/device or class rules).
    pub matches: &'static [DeviceMatch],
    /// Parses the driver's command-line words (`name.key=value`, all of
    /// them, possibly none) once at boot, before any probe.
    pub configure: fn(words: &[&str]) -> Result<(), Error>,
    /// Brings up one matching function and registers its block devices.
    pub probe: fn(function: &'static PciFunction) -> Result<(), Error>,
    /// The device floor before a job on `device` (`NAME.floor=`): measured on CPU `cpu` with
    /// reads as long as the job's blocks, its `floor:` line printed and its figures returned for
    /// the job's totals. Empty when `device` is not this driver's or its floor is off.
    pub floor_before_job: Option<fn(device: &str, cpu: usize, job: super::FloorJob) -> FloorFigures>,
    /// Before jobs that start together: aims the interrupts of this driver's controllers at the
    /// jobs' submitting CPUs, where that saves a wake-up. The guard aims them back.
    pub aim_for_jobs: Option<fn(jobs: &[JobDevices<'_>]) -> AimGuard>,
}
