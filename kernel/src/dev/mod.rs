//! The device layer: PCI, device interrupts, block devices and the drivers'
//! probe glue.
//!
//! What lives here: PCI configuration access, enumeration and BAR claiming
//! ([`pci`]); device interrupts, one typed handler per vector, with the I/O
//! APIC for INTx ([`interrupts`]); the one CPU map shared by block queues and
//! interrupt affinity ([`cpumap`]); the block-device registry and the kernel's
//! hooks for the `blk` layer ([`block`]); what a PCI driver provides
//! ([`driver`]: match rules, command-line keys, probe) and the table of them
//! ([`registry`]); one small probe file per driver ([`megasas`], [`fusion`], [`nvme`], [`null`]),
//! with what the MegaRAID probes share in [`hosts`].
//!
//! What it may use: `crate::arch` and the library and driver crates, never
//! `crate::app`.

pub mod block;
pub mod cpumap;
pub mod driver;
pub mod fusion;
pub mod hosts;
pub mod interrupts;
pub mod megasas;
pub mod null;
pub mod nvme;
pub mod pci;
pub mod registry;

/// The device floor before a job on `device` (`megasas.floor=`, `nvme.floor=`): the driver
/// that owns `device` measures it, prints its `floor:` line and returns the figures for the
/// job's totals; empty when its floor is off or no driver measures one.
pub fn floor_before_job(device: &str, cpu: usize) -> alloc::vec::Vec<(&'static str, u64)> {
    let figures = megasas::floor_before_job(device, cpu);
    if !figures.is_empty() {
        return figures;
    }
    nvme::floor_before_job(device, cpu)
}
