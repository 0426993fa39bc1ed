//! ACPI discovery on the running machine: the RSDP from the loader (copy or
//! address) or the BIOS areas, then the MADT and MCFG, parsed by the
//! host-tested `platform::acpi` code over the identity map.

use crate::arch::memory::IdentityMap;
use bootinfo::BootInfo;
use bootinfo::parse::RsdpSource;
use platform::acpi::{AcpiTables, Madt, Mcfg, Rsdp, Spcr};

/// What the firmware tables say about the machine.
#[derive(Debug)]
pub struct Firmware {
    pub rsdp_from: &'static str,
    pub revision: u8,
    pub oem: heapless::String<8>,
    pub madt: Madt,
    pub mcfg: Option<Mcfg>,
    /// The console UART the firmware names; a broken table is kept as its error
    /// (the console falls back to probing, the boot goes on).
    pub spcr: platform::Result<Option<Spcr>>,
}

/// Finds and parses the ACPI tables.
pub fn discover(boot: &BootInfo) -> platform::Result<Firmware> {
    let (rsdp, from) = match &boot.rsdp {
        Some(RsdpSource::Copy(bytes)) => (Rsdp::parse(bytes)?, "the loader (copy)"),
        Some(RsdpSource::Address(a)) => (Rsdp::read(&IdentityMap, *a)?, "the loader (address)"),
        None => (Rsdp::find_in_bios_areas(&IdentityMap)?, "the BIOS area"),
    };
    let tables = AcpiTables::new(IdentityMap, &rsdp)?;
    let mut oem = heapless::String::new();
    for &b in rsdp.oem_id.iter() {
        let _ = oem.push(if b.is_ascii_graphic() { b as char } else { ' ' });
    }
    Ok(Firmware {
        rsdp_from: from,
        revision: rsdp.revision,
        oem,
        madt: tables.madt()?,
        mcfg: tables.mcfg()?,
        spcr: tables.spcr(),
    })
}

static FIRMWARE: spin::Once<Firmware> = spin::Once::new();

/// Records the parsed tables for the rest of the kernel.
pub fn set(fw: Firmware) -> &'static Firmware {
    FIRMWARE.call_once(|| fw)
}

/// The parsed tables (after boot has called [`set`]).
pub fn get() -> &'static Firmware {
    FIRMWARE
        .get()
        .expect("firmware tables are parsed during boot, before any device is set up")
}
