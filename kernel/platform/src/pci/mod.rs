//! PCI: configuration access helpers, enumeration, BARs, capabilities,
//! MSI / MSI-X, driver matching and an lspci-like listing.
//!
//! Configuration space is reached through `pci_types::ConfigRegionAccess`
//! (kernel: ECAM through [`EcamAccess`] or port I/O; tests: a fake). The
//! walkers of `pci_types` itself are not used for device-supplied values:
//! its BAR decoder panics on the reserved memory type and sizes BARs with
//! decoding left on, and its capability iterator follows a looping list
//! forever; see the crate README.
//!
//! Contract for the `ConfigRegionAccess` passed in: it must accept any
//! address on the buses being scanned and any 4-byte-aligned offset below
//! 256, returning all-ones for absent functions. This module only issues
//! such accesses.

mod assign;
mod bar;
mod caps;
mod config;
mod display;
mod ecam;
mod enumerate;
mod matching;
mod msi;

pub use assign::{
    IO_WINDOW_GRANULARITY, LeftOff, MEMORY_WINDOW_GRANULARITY, PlannedBar, PlannedBridge, Refusal, ResourcePlan,
    ResourceWindows, apply_plan, assign_resources, plan_resources,
};
pub use bar::{Bar, BarKind, BarSlot, MAX_BAR_SIZE, read_bars};
pub use caps::{
    CAP_MSI, CAP_MSIX, CAP_PCIE, CAP_PM, CAP_VENDOR, Capability, MAX_CAPABILITIES, capability_name, walk_capabilities,
};
pub use config::{COMMAND, ConfigSpace, INTERRUPT_LINE, STATUS_CAPABILITY_LIST};
pub use display::{PciListing, class_name};
pub use ecam::{EcamAccess, EcamWindows, ecam_offset, legacy_config_address};
pub use enumerate::{
    HeaderKind, PciFunction, ScanMode, enumerate, find_root_buses, read_function, refuse_outside_laid_out_tree,
    root_buses,
};
pub use matching::{DeviceMatch, PciDriver, match_driver};
pub use msi::{
    MSI_ADDRESS_BASE, MsiCapability, MsiMessage, MsixCapability, MsixEntry, MsixTable, msi_disable, msi_program,
    msix_pending, msix_set_control,
};
pub use pci_types::{CommandRegister, ConfigRegionAccess, PciAddress};

/// Enables memory decoding and/or bus mastering (and never clears either);
/// what a driver does when it claims a function.
pub fn enable_device<A: ConfigRegionAccess + ?Sized>(
    access: &A,
    address: PciAddress,
    memory: bool,
    io: bool,
    bus_master: bool,
) -> crate::Result<CommandRegister> {
    let cfg = ConfigSpace::new(access, address);
    let mut command = cfg.command()?;
    command.set(
        CommandRegister::MEMORY_ENABLE,
        memory || command.contains(CommandRegister::MEMORY_ENABLE),
    );
    command.set(
        CommandRegister::IO_ENABLE,
        io || command.contains(CommandRegister::IO_ENABLE),
    );
    command.set(
        CommandRegister::BUS_MASTER_ENABLE,
        bus_master || command.contains(CommandRegister::BUS_MASTER_ENABLE),
    );
    cfg.set_command(command)?;
    Ok(command)
}

/// Sets or clears the command register's INTx disable bit (set it when
/// using MSI / MSI-X, clear it for INTx).
pub fn set_intx_disabled<A: ConfigRegionAccess + ?Sized>(
    access: &A,
    address: PciAddress,
    disabled: bool,
) -> crate::Result<()> {
    let cfg = ConfigSpace::new(access, address);
    let mut command = cfg.command()?;
    command.set(CommandRegister::INTERRUPT_DISABLE, disabled);
    cfg.set_command(command)
}
