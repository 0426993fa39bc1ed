//! PCI on the running machine: configuration access (ECAM from the MCFG
//! when there is one, else ports 0xCF8/0xCFC), enumeration and the lspci-like
//! listing through the host-tested `platform::pci` code, and claiming a
//! function for a driver (BAR mapping, memory space and bus mastering).

use crate::arch::memory;
use crate::error::Error;
use alloc::vec::Vec;
use platform::acpi::Mcfg;
use platform::mmio::VolatileMmio;
use platform::pci::{CommandRegister, ConfigRegionAccess, EcamAccess, PciAddress, PciFunction, ScanMode};
use x86_64::instructions::port::Port;

/// Legacy configuration mechanism #1.
pub struct PortConfig {
    lock: spin::Mutex<()>,
}

impl ConfigRegionAccess for PortConfig {
    unsafe fn read(&self, address: PciAddress, offset: u16) -> u32 {
        let Ok(addr) = platform::pci::legacy_config_address(address, offset) else {
            return u32::MAX;
        };
        let _g = self.lock.lock();
        // SAFETY: the address/data port pair is used under the lock, so no
        // other CPU can retarget 0xCF8 between the two accesses.
        unsafe {
            Port::<u32>::new(0xCF8).write(addr);
            Port::<u32>::new(0xCFC).read()
        }
    }

    unsafe fn write(&self, address: PciAddress, offset: u16, value: u32) {
        let Ok(addr) = platform::pci::legacy_config_address(address, offset) else {
            return;
        };
        let _g = self.lock.lock();
        // SAFETY: as in `read`.
        unsafe {
            Port::<u32>::new(0xCF8).write(addr);
            Port::<u32>::new(0xCFC).write(value);
        }
    }
}

/// The configuration access in use.
pub enum ConfigAccess {
    Ecam(EcamAccess<VolatileMmio>),
    Port(PortConfig),
}

impl ConfigRegionAccess for ConfigAccess {
    unsafe fn read(&self, address: PciAddress, offset: u16) -> u32 {
        // SAFETY: forwarded contract.
        unsafe {
            match self {
                ConfigAccess::Ecam(e) => e.read(address, offset),
                ConfigAccess::Port(p) => p.read(address, offset),
            }
        }
    }

    unsafe fn write(&self, address: PciAddress, offset: u16, value: u32) {
        // SAFETY: forwarded contract.
        unsafe {
            match self {
                ConfigAccess::Ecam(e) => e.write(address, offset, value),
                ConfigAccess::Port(p) => p.write(address, offset, value),
            }
        }
    }
}

/// Everything enumeration found.
pub struct Pci {
    pub access: ConfigAccess,
    pub mechanism: &'static str,
    pub functions: Vec<PciFunction>,
}

static PCI: spin::Once<Pci> = spin::Once::new();

/// The enumerated bus (after [`init`]).
pub fn get() -> Option<&'static Pci> {
    PCI.get()
}

/// Sets up configuration access and enumerates segment 0.
pub fn init(mcfg: Option<&Mcfg>) -> Result<&'static Pci, Error> {
    let window = mcfg.and_then(|m| m.windows.iter().find(|w| w.segment == 0).copied());
    let (access, mechanism, buses) = match window {
        Some(w) => {
            let base = memory::map_mmio(w.region_base(), w.region_len())?;
            // SAFETY: the ECAM window is now an uncached identity mapping of
            // `region_len` bytes that nothing else references.
            let mmio = unsafe { VolatileMmio::new(base, w.region_len() as usize) };
            (
                ConfigAccess::Ecam(EcamAccess::new(mmio, w)?),
                "ECAM (MCFG)",
                w.bus_start..=w.bus_end,
            )
        }
        None => (
            ConfigAccess::Port(PortConfig {
                lock: spin::Mutex::new(()),
            }),
            "port I/O 0xCF8",
            0..=255,
        ),
    };
    let mut functions = platform::pci::enumerate(&access, 0, buses, ScanMode::FollowBridges)?;
    assign_unassigned_bars(
        &access,
        &mut functions,
        window.map(|w| w.region_base() + w.region_len()),
    )?;
    Ok(PCI.call_once(|| Pci {
        access,
        mechanism,
        functions,
    }))
}

/// Where baremq places BARs the firmware left unassigned (qboot assigns
/// none): the 32-bit PCI hole above RAM and the ECAM window, below the I/O
/// APIC / LAPIC area at 0xFEC0_0000.
const MMIO_WINDOW_END: u64 = 0xFEC0_0000;
const MMIO_WINDOW_FLOOR: u64 = 0xC000_0000;
const IO_WINDOW: core::ops::Range<u64> = 0xC000..0x1_0000;

/// Gives every unassigned BAR of a bus-0 function an address, so drivers can
/// use devices whatever the firmware did. Decoding is off while a BAR is
/// written; the function is then read again.
fn assign_unassigned_bars(
    access: &ConfigAccess,
    functions: &mut [PciFunction],
    ecam_end: Option<u64>,
) -> Result<(), Error> {
    let ram_top = crate::arch::memory::ram_top_below_4g();
    let mut next_mem = ram_top.max(MMIO_WINDOW_FLOOR).max(ecam_end.unwrap_or(0));
    let mut next_io = IO_WINDOW.start;
    // Place the largest BARs first so alignment wastes little of the window.
    let mut wanted: Vec<(u64, usize, u8)> = Vec::new();
    for (i, f) in functions.iter().enumerate() {
        for slot in 0..6u8 {
            if let Some(bar) = f.bar(slot)
                && bar.address == 0
                && bar.size > 0
            {
                wanted.push((bar.size, i, slot));
            }
        }
    }
    wanted.sort_unstable_by_key(|w| core::cmp::Reverse(w.0));
    let mut touched: Vec<usize> = Vec::new();
    for (size, i, slot) in wanted {
        let f = &functions[i];
        let bar = f.bar(slot).copied().expect("collected above");
        if f.address.bus() != 0 {
            log::warn!(
                "pci: {} BAR{slot} unassigned behind a bridge; not supported, left off",
                f.address
            );
            continue;
        }
        let addr = if bar.is_memory() {
            let a = next_mem.next_multiple_of(size);
            if a + size > MMIO_WINDOW_END {
                log::warn!("pci: no room for {} BAR{slot} ({size:#x} bytes)", f.address);
                continue;
            }
            next_mem = a + size;
            a
        } else {
            let a = next_io.next_multiple_of(size);
            if a + size > IO_WINDOW.end {
                log::warn!("pci: no I/O room for {} BAR{slot}", f.address);
                continue;
            }
            next_io = a + size;
            a
        };
        let cfg = platform::pci::ConfigSpace::new(access, f.address);
        let command = cfg.command()?;
        cfg.set_command(command - (CommandRegister::MEMORY_ENABLE | CommandRegister::IO_ENABLE))?;
        let offset = 0x10 + 4 * u16::from(slot);
        let low_flags = cfg.read32(offset)? & if bar.is_memory() { 0xF } else { 0x3 };
        cfg.write32(offset, (addr as u32) | low_flags)?;
        if bar.kind == platform::pci::BarKind::Memory64 {
            cfg.write32(offset + 4, (addr >> 32) as u32)?;
        }
        cfg.set_command(command)?;
        log::debug!("pci: {} BAR{slot} assigned {addr:#x} ({size:#x} bytes)", f.address);
        if !touched.contains(&i) {
            touched.push(i);
        }
    }
    for i in touched {
        if let Some(f) = platform::pci::read_function(access, functions[i].address)? {
            functions[i] = f;
        }
    }
    Ok(())
}

/// A function claimed by a driver: memory BARs mapped uncached, memory
/// space and bus mastering enabled.
pub fn claim(function: &PciFunction) -> Result<(), Error> {
    let pci = get().ok_or(Error::NoPci)?;
    for slot in 0..6u8 {
        if let Some(bar) = function.bar(slot)
            && bar.is_memory()
            && bar.size > 0
        {
            memory::map_mmio(bar.address, bar.size)?;
        }
    }
    platform::pci::enable_device(&pci.access, function.address, true, true, true)?;
    Ok(())
}

/// Turns a claimed function's bus mastering on or off (off: the device can no
/// longer read or write memory, so the buffers of its requests are free again).
pub fn set_bus_master(function: &PciFunction, on: bool) -> Result<(), Error> {
    let pci = get().ok_or(Error::NoPci)?;
    let cfg = platform::pci::ConfigSpace::new(&pci.access, function.address);
    let mut command = cfg.command()?;
    command.set(platform::pci::CommandRegister::BUS_MASTER_ENABLE, on);
    cfg.set_command(command)?;
    Ok(())
}

/// Functions matching `vendor:device`.
pub fn find(vendor: u16, device: u16) -> impl Iterator<Item = &'static PciFunction> {
    get().into_iter().flat_map(move |p| {
        p.functions
            .iter()
            .filter(move |f| f.vendor_id == vendor && f.device_id == device)
    })
}

/// A volatile accessor over a claimed memory BAR.
pub fn bar_mmio(function: &PciFunction, slot: u8) -> Result<VolatileMmio, Error> {
    let bar = function
        .bar(slot)
        .filter(|b| b.is_memory() && b.size > 0)
        .ok_or_else(|| Error::Device(alloc::format!("{} has no memory BAR {slot}", function.address)))?;
    let base = memory::map_mmio(bar.address, bar.size)?;
    // SAFETY: the BAR is mapped uncached for its whole size; baremq touches
    // device memory only through volatile accessors like this one.
    Ok(unsafe { VolatileMmio::new(base, bar.size as usize) })
}
