//! What the probes of controllers that own their queues (MegaRAID MFI in [`super::megasas`],
//! Fusion in [`super::fusion`]) do alike once the driver's host is up: register each logical
//! drive's queue as a block device `<prefix>N`, numbered across every controller of the driver.

use crate::dev::block::{self, DeviceFacts, Disk, HostHooks};
use crate::error::Error;
use alloc::boxed::Box;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use blk::{Driver, Queue};

/// What every drive of one controller shares in its block-device facts.
pub struct ControllerDisks<'a> {
    /// The driver's drive counter (the `N` of the next name), shared by its controllers.
    pub next_drive: &'a spin::Mutex<usize>,
    /// Name prefix (`md` for MFI, `mf` for Fusion).
    pub prefix: &'a str,
    /// The controller's poll and tick, which the kernel drives for all its disks.
    pub host: &'static dyn HostHooks,
    /// Requests in flight at most (the controller's I/O tags, shared by its drives).
    pub max_inflight: u32,
    /// IDT vectors of the controller's interrupts.
    pub irq_vectors: Vec<crate::dev::interrupts::Vector>,
    /// The job report's extra line (interrupts, queues, tags).
    pub extra: String,
}

/// One logical drive as the driver's host serves it.
pub struct Drive<D: Driver + 'static> {
    /// The drive's queue, owned by the controller's host.
    pub queue: &'static Queue<D>,
    /// Model text for the device list.
    pub model: String,
    /// Logical block size in bytes.
    pub sector_size: u32,
    /// Capacity as the device facts report it.
    pub capacity_sectors: u64,
    /// Most bytes per request.
    pub max_transfer_bytes: u32,
    /// Stable names beside `<prefix>N` (`disks::names::raid_aliases`).
    pub aliases: Vec<String>,
}

/// Registers `drives` in order, naming each from the controller's counter. Stops at the first
/// drive the driver could not describe (its error), leaving the ones before it registered.
pub fn register_drives<D: Driver + 'static>(
    ctrl: &ControllerDisks<'_>,
    drives: impl IntoIterator<Item = Result<Drive<D>, Error>>,
) -> Result<(), Error> {
    for drive in drives {
        let name = {
            let mut n = ctrl.next_drive.lock();
            let name = format!("{}{}", ctrl.prefix, *n);
            *n += 1;
            name
        };
        let drive = drive?;
        let facts = DeviceFacts {
            name,
            model: drive.model,
            sector_size: drive.sector_size,
            capacity_sectors: drive.capacity_sectors,
            max_inflight: ctrl.max_inflight,
            max_transfer_bytes: drive.max_transfer_bytes,
            irq_vectors: ctrl.irq_vectors.clone(),
            aliases: drive.aliases,
        };
        let disk: &'static Disk<D> = Box::leak(Box::new(Disk::with_queue(
            facts,
            drive.queue,
            ctrl.host,
            ctrl.extra.clone(),
        )));
        block::register(disk);
    }
    Ok(())
}
