//! ACPI discovery on the running machine: the RSDP from the loader (copy or
//! address) or the BIOS areas, then the MADT and MCFG (required to parse),
//! and the SRAT/SLIT, HPET, FADT, DMAR and IVRS (optional: one that is
//! malformed is reported and left out), parsed by the host-tested
//! `platform::acpi` code over the identity map.

use crate::arch::memory::IdentityMap;
use alloc::string::String;
use alloc::vec::Vec;
use bootinfo::BootInfo;
use bootinfo::parse::RsdpSource;
use platform::acpi::{AcpiTables, Dmar, Hpet, Ivrs, Madt, Mcfg, NumaTopology, PmTimer, Rsdp, Spcr};

/// What the firmware tables say about the machine.
#[derive(Debug)]
pub struct Firmware {
    pub rsdp_from: &'static str,
    pub revision: u8,
    pub oem: heapless::String<8>,
    pub madt: Madt,
    pub mcfg: Option<Mcfg>,
    /// NUMA layout from the SRAT (and SLIT); `None` without an SRAT.
    pub numa: Option<NumaTopology>,
    pub hpet: Option<Hpet>,
    /// The ACPI PM timer from the FADT, when it names a usable one.
    pub pm_timer: Option<PmTimer>,
    pub dmar: Option<Dmar>,
    pub ivrs: Option<Ivrs>,
    /// Optional tables left out, and why (one line each, for the boot log).
    pub ignored: Vec<String>,
    /// The console UART the firmware names; a broken table is kept as its error
    /// (the console falls back to probing, the boot goes on).
    pub spcr: platform::Result<Option<Spcr>>,
    /// The DSDT and SSDTs (revision, AML), copied for `dev::aml`; an error
    /// when they cannot be read (AML is then skipped, not fatal).
    pub aml_blocks: platform::Result<Vec<(u8, Vec<u8>)>>,
}

impl Firmware {
    /// The NUMA node of the CPU with `apic_id` (`None` without an SRAT or when it lists no such CPU).
    pub fn node_of_apic_id(&self, apic_id: u32) -> Option<u32> {
        self.numa.as_ref()?.node_of_apic_id(apic_id)
    }

    /// The NUMA node whose memory holds `phys`.
    pub fn node_of_address(&self, phys: u64) -> Option<u32> {
        self.numa.as_ref()?.node_of_address(phys)
    }
}

/// An optional table: its value, or `None` with the reason recorded.
fn optional<T>(name: &str, result: platform::Result<Option<T>>, ignored: &mut Vec<String>) -> Option<T> {
    match result {
        Ok(value) => value,
        Err(e) => {
            ignored.push(alloc::format!("acpi: {name} ignored: {e}"));
            None
        }
    }
}

/// Finds and parses the ACPI tables.
pub fn discover(boot: &BootInfo) -> platform::Result<Firmware> {
    let (rsdp, from) = match &boot.rsdp {
        Some(RsdpSource::Copy(bytes)) => (Rsdp::parse(bytes)?, "the loader (copy)"),
        Some(RsdpSource::Address(a)) => (Rsdp::read(&IdentityMap, *a)?, "the loader (address)"),
        Some(RsdpSource::EfiSystemTable(a)) => (Rsdp::from_efi_system_table(&IdentityMap, *a)?, "the EFI system table"),
        None => (Rsdp::find_in_bios_areas(&IdentityMap)?, "the BIOS area"),
    };
    let tables = AcpiTables::new(IdentityMap, &rsdp)?;
    let mut oem = heapless::String::new();
    for &b in rsdp.oem_id.iter() {
        let _ = oem.push(if b.is_ascii_graphic() { b as char } else { ' ' });
    }
    let madt = tables.madt()?;
    let mcfg = tables.mcfg()?;
    let mut ignored = Vec::new();
    let numa = optional("SRAT/SLIT", tables.numa(), &mut ignored);
    let hpet = optional("HPET", tables.hpet(), &mut ignored);
    let pm_timer = match optional("FADT", tables.fadt(), &mut ignored) {
        Some(fadt) => match fadt.pm_timer {
            Ok(pm) => Some(pm),
            Err(why) => {
                ignored.push(alloc::format!("acpi: no ACPI PM timer: {why}"));
                None
            }
        },
        None => None,
    };
    let dmar = optional("DMAR", tables.dmar(), &mut ignored);
    let ivrs = optional("IVRS", tables.ivrs(), &mut ignored);
    Ok(Firmware {
        rsdp_from: from,
        revision: rsdp.revision,
        oem,
        madt,
        mcfg,
        numa,
        hpet,
        pm_timer,
        dmar,
        ivrs,
        ignored,
        spcr: tables.spcr(),
        aml_blocks: tables.definition_blocks(),
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
