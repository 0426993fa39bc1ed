//! PCI on the running machine: configuration access (ECAM from every MCFG
//! window, else ports 0xCF8/0xCFC), enumeration of every segment and root bus and the lspci-like
//! listing through the host-tested `platform::pci` code, and claiming a
//! function for a driver (BAR mapping, memory space and bus mastering).

use crate::arch::memory;
use crate::error::Error;
use alloc::vec::Vec;
use platform::acpi::Mcfg;
use platform::mmio::VolatileMmio;
use platform::pci::{ConfigRegionAccess, EcamAccess, EcamWindows, PciAddress, PciFunction, ScanMode};
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
    /// Every mapped MCFG window (every segment).
    Ecam(EcamWindows<VolatileMmio>),
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
    /// Every root bus that has a function, as (segment, bus), in order.
    pub roots: Vec<(u16, u8)>,
}

static PCI: spin::Once<Pci> = spin::Once::new();

/// The enumerated bus (after [`init`]).
pub fn get() -> Option<&'static Pci> {
    PCI.get()
}

/// Sets up configuration access and enumerates every segment of the MCFG
/// (segment 0 through ports 0xCF8/0xCFC without one) and every root bus in
/// each: a server has one per socket or I/O stack, and its RAID card and
/// NVMe drives are mostly not under bus 00. Only bus 00's tree of segment 0
/// is laid out by baremq (qboot assigns nothing); elsewhere the firmware's
/// assignments are kept, and what the firmware left unassigned is refused.
pub fn init(mcfg: Option<&Mcfg>) -> Result<&'static Pci, Error> {
    let mut ecam = Vec::new();
    let mut ecam_end = 0;
    for w in mcfg.map(|m| m.windows.as_slice()).unwrap_or(&[]) {
        match memory::map_mmio(w.region_base(), w.region_len()) {
            Ok(base) => {
                // SAFETY: the ECAM window is now an uncached identity mapping of
                // `region_len` bytes that nothing else references.
                let mmio = unsafe { VolatileMmio::new(base, w.region_len() as usize) };
                ecam.push(EcamAccess::new(mmio, *w)?);
                if w.segment == 0 && w.region_base() < MMIO_WINDOW_END {
                    ecam_end = ecam_end.max(w.region_base() + w.region_len());
                }
            }
            // One window out of reach must not hide the others.
            Err(e) => log::warn!(
                "pci: segment {:04x} buses {:02x}-{:02x}: ECAM at {:#x} not mapped ({e}); not scanned",
                w.segment,
                w.bus_start,
                w.bus_end,
                w.region_base()
            ),
        }
    }
    let ecam = EcamWindows::new(ecam);
    let (access, mechanism, segments) = if ecam.is_empty() {
        if mcfg.is_some_and(|m| !m.windows.is_empty()) {
            log::warn!("pci: no MCFG window could be mapped; using port I/O 0xCF8 (segment 0 only)");
        }
        (
            ConfigAccess::Port(PortConfig {
                lock: spin::Mutex::new(()),
            }),
            "port I/O 0xCF8",
            alloc::vec![(0, 0..=255)],
        )
    } else {
        let segments = ecam.segments();
        (ConfigAccess::Ecam(ecam), "ECAM (MCFG)", segments)
    };
    // Give every function the firmware left unassigned (qboot assigns nothing) its bus numbers,
    // bridge windows and BARs, behind bridges too; a function whose BARs cannot be placed is
    // refused here and never matched by a driver. Only segment 0's first root bus: its bus
    // numbers stay below the next root bus, which belongs to another host bridge.
    let laid_out = match segments.iter().find(|(s, _)| *s == 0) {
        Some((_, buses)) => {
            let roots = platform::pci::find_root_buses(&access, 0, buses.clone())?;
            let root = roots.first().copied().unwrap_or(*buses.start());
            let next_root = roots.iter().copied().find(|&r| r > root);
            let end = next_root.map_or(*buses.end(), |r| r - 1);
            assign_bus0_tree(&access, root..=end, ecam_end)?;
            Some((0, root))
        }
        None => None,
    };
    let mut functions = Vec::new();
    for (segment, buses) in &segments {
        functions.extend(platform::pci::enumerate(
            &access,
            *segment,
            buses.clone(),
            ScanMode::EveryRoot,
        )?);
    }
    if let Some(plan) = ASSIGNMENT.get() {
        plan.mark_refused(&mut functions);
    }
    platform::pci::refuse_outside_laid_out_tree(&mut functions, laid_out);
    let roots = platform::pci::root_buses(&functions);
    Ok(PCI.call_once(|| Pci {
        access,
        mechanism,
        functions,
        roots,
    }))
}

/// The plan [`assign_bus0_tree`] applied (its refusals are copied into the listing).
static ASSIGNMENT: spin::Once<platform::pci::ResourcePlan> = spin::Once::new();

/// Lays out bus 00's tree of segment 0 (`buses`: its root and the bus numbers
/// it may use) in the 32-bit PCI hole above RAM and the ECAM window (`ecam_end`).
fn assign_bus0_tree(access: &ConfigAccess, buses: core::ops::RangeInclusive<u8>, ecam_end: u64) -> Result<(), Error> {
    let hole_start = crate::arch::memory::ram_top_below_4g()
        .max(MMIO_WINDOW_FLOOR)
        .max(ecam_end);
    let plan = platform::pci::assign_resources(
        access,
        0,
        &platform::pci::ResourceWindows {
            memory: hole_start..MMIO_WINDOW_END,
            io: Some(IO_WINDOW),
            buses,
        },
    )?;
    for r in &plan.refused {
        log::warn!("pci: {} refused: {}", r.function, r.reason);
    }
    for l in &plan.left_off {
        log::warn!("pci: {} I/O BAR{} left off: {}", l.function, l.slot, l.reason);
    }
    for b in &plan.bridges {
        if let (true, Some(m)) = (b.owned, &b.memory) {
            log::info!(
                "pci: bridge {} buses {}-{}, memory window {:#x}-{:#x}",
                b.bridge,
                b.secondary,
                b.subordinate,
                m.start,
                m.end
            );
        }
    }
    for b in &plan.bars {
        log::debug!(
            "pci: {} BAR{} assigned {:#x} ({:#x} bytes)",
            b.function,
            b.slot,
            b.address,
            b.size
        );
    }
    ASSIGNMENT.call_once(|| plan);
    Ok(())
}

/// Where baremq places BARs the firmware left unassigned (qboot assigns
/// none): the 32-bit PCI hole above RAM and the ECAM window, below the I/O
/// APIC / LAPIC area at 0xFEC0_0000.
const MMIO_WINDOW_END: u64 = 0xFEC0_0000;
const MMIO_WINDOW_FLOOR: u64 = 0xC000_0000;
const IO_WINDOW: core::ops::Range<u64> = 0xC000..0x1_0000;

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

/// Takes a controller its driver gave up on out of service, once (`done` remembers it): turns
/// the function's bus mastering off and only then runs `release`, which hands back the requests
/// the device still held and says how many (the device may write into their buffers until it
/// can no longer master the bus). If bus mastering cannot be turned off, nothing is released:
/// those requests stay the device's. `name` starts the log lines.
pub fn take_out_of_service(
    function: &PciFunction,
    name: &str,
    done: &core::sync::atomic::AtomicBool,
    release: impl FnOnce() -> u32,
) {
    if done.swap(true, core::sync::atomic::Ordering::Relaxed) {
        return;
    }
    match set_bus_master(function, false) {
        Ok(()) => log::error!(
            "{name}: controller out of service: bus mastering off, {} request(s) failed",
            release()
        ),
        Err(e) => log::error!(
            "{name}: controller out of service, but bus mastering could not be turned off ({e}): its requests stay the device's"
        ),
    }
}

/// `address` as the block layer's stable device names spell it.
pub fn location(address: PciAddress) -> disks::names::PciLocation {
    disks::names::PciLocation {
        segment: address.segment(),
        bus: address.bus(),
        device: address.device(),
        function: address.function(),
    }
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
