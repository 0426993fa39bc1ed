//! AML on the running machine: the DSDT and SSDTs evaluated by the
//! host-tested `platform::aml` interpreter, with operation regions reaching
//! the hardware, for the PCI host bridges, the `_PRT` INTx routes and the
//! devices' `_PXM` proximity. Loads once, after PCI enumeration (its
//! `PCI_Config` regions need configuration access) and before any driver,
//! and evaluates the host bridges and `_PXM` then; a `_PRT` table is
//! evaluated when a function first needs an INTx route from it (MSI and
//! MSI-X never do), with the namespace kept for that.
//!
//! Every AML failure is reported and costs only its result: without a route
//! from `_PRT`, INTx uses the firmware line and the chipset router; without
//! host bridges, the MCFG scan stands alone.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use platform::Token;
use platform::acpi::{IrqRoute, PhysMemory};
use platform::aml::{self, Discovery, Interpreter, RegionHandler, RegionSpace, RouteSource};
use platform::pci::{ConfigSpace, PciFunction};
use x86_64::instructions::port::Port;

use crate::arch::firmware::Firmware;
use crate::arch::memory::IdentityMap;
use crate::dev::pci::Pci;

/// The loaded namespace and what the boot found in it; `None` when AML is
/// off or has no tables.
struct Namespace {
    interp: Interpreter<'static>,
    discovery: Discovery,
}

static NAMESPACE: spin::Mutex<Option<Namespace>> = spin::Mutex::new(None);

fn refused(space: &str, what: &'static str, value: u64) -> platform::Error {
    platform::Error::Aml {
        at: Token::new(space),
        offset: 0,
        what,
        value,
    }
}

/// Operation regions on the hardware: port I/O, PCI configuration space
/// (through the kernel's configuration access), and memory reads through
/// the identity map. Memory writes are refused: nothing baremq evaluates
/// needs them, and a stray write could hit anything.
struct Hardware {
    pci: &'static Pci,
}

impl RegionHandler for Hardware {
    fn read(&mut self, space: RegionSpace, address: u64, width: u8) -> platform::Result<u64> {
        match space {
            RegionSpace::Io => {
                let port = u16::try_from(address).map_err(|_| refused("SystemIO", "port beyond 0xffff", address))?;
                // SAFETY: the firmware's own AML names this port for this access; a read of
                // an I/O port has no memory-safety effect on the kernel.
                let value = unsafe {
                    match width {
                        1 => u64::from(Port::<u8>::new(port).read()),
                        2 => u64::from(Port::<u16>::new(port).read()),
                        4 => u64::from(Port::<u32>::new(port).read()),
                        _ => {
                            return Err(refused(
                                "SystemIO",
                                "access width is not 1, 2 or 4 bytes",
                                u64::from(width),
                            ));
                        }
                    }
                };
                Ok(value)
            }
            RegionSpace::Memory => {
                let mut bytes = [0u8; 8];
                let len = usize::from(width).min(8);
                IdentityMap.read_bytes(address, &mut bytes[..len])?;
                Ok(u64::from_le_bytes(bytes))
            }
            RegionSpace::PciConfig(function) => {
                let config = ConfigSpace::new(&self.pci.access, function);
                aml::config_access(&config, address, width, None)
            }
        }
    }

    fn write(&mut self, space: RegionSpace, address: u64, width: u8, value: u64) -> platform::Result<()> {
        match space {
            RegionSpace::Io => {
                let port = u16::try_from(address).map_err(|_| refused("SystemIO", "port beyond 0xffff", address))?;
                // SAFETY: the firmware's own AML writes this port (as its OS would let it).
                unsafe {
                    match width {
                        1 => Port::<u8>::new(port).write(value as u8),
                        2 => Port::<u16>::new(port).write(value as u16),
                        4 => Port::<u32>::new(port).write(value as u32),
                        _ => {
                            return Err(refused(
                                "SystemIO",
                                "access width is not 1, 2 or 4 bytes",
                                u64::from(width),
                            ));
                        }
                    }
                }
                Ok(())
            }
            RegionSpace::Memory => Err(refused("SystemMemory", "AML memory writes are not performed", address)),
            RegionSpace::PciConfig(function) => {
                let config = ConfigSpace::new(&self.pci.access, function);
                aml::config_access(&config, address, width, Some(value)).map(|_| ())
            }
        }
    }
}

/// Problems printed one per line; the rest are counted.
const PROBLEM_LINES: usize = 8;

/// Loads and evaluates the namespace; returns the boot log lines. `enabled`
/// is `aml=` (off: nothing is evaluated).
pub fn init(fw: &Firmware, pci: &'static Pci, enabled: bool) -> Vec<String> {
    let mut lines = Vec::new();
    if !enabled {
        lines.push("aml: off (aml=off): host bridges from the MCFG scan, INTx from the firmware line".into());
        return lines;
    }
    let blocks = match &fw.aml_blocks {
        Ok(blocks) if !blocks.is_empty() => blocks,
        Ok(_) => {
            lines.push("aml: no DSDT or SSDT; INTx from the firmware line".into());
            return lines;
        }
        Err(e) => {
            lines.push(format!("aml: tables unreadable ({e}); INTx from the firmware line"));
            return lines;
        }
    };
    // The interpreter is kept for the boot's life (deferred `_PRT` tables): so is its handler.
    let hardware: &'static mut Hardware = alloc::boxed::Box::leak(alloc::boxed::Box::new(Hardware { pci }));
    let mut interp = aml::load(hardware, blocks);
    let discovery = aml::discover_deferred(&mut interp);
    lines.push(format!(
        "aml: {} definition block(s), {} objects, {} steps, {} KiB of stack at most",
        blocks.len(),
        interp.object_count(),
        interp.steps_total(),
        interp.stack_high_water().div_ceil(1024)
    ));
    for problem in interp.load_problems.iter().take(PROBLEM_LINES) {
        lines.push(format!(
            "aml: load problem (block {}): {}",
            problem.table, problem.error
        ));
    }
    for bridge in &discovery.bridges {
        lines.push(format!(
            "aml: host bridge {} {}{}: segment {:04x} _BBN {} buses {} _PXM {}, {} window(s)",
            bridge.path,
            bridge.id,
            bridge.uid.as_ref().map(|u| format!(" _UID {u}")).unwrap_or_default(),
            bridge.segment,
            bridge.bbn.map(|b| format!("{b:02x}")).unwrap_or_else(|| "-".into()),
            bridge
                .buses
                .map(|(a, b)| format!("{a:02x}-{b:02x}"))
                .unwrap_or_else(|| "-".into()),
            bridge.pxm.map(|p| format!("{p}")).unwrap_or_else(|| "-".into()),
            bridge.windows.len()
        ));
    }
    // Cross-checks with what the MCFG and the scan found.
    if let Some(mcfg) = &fw.mcfg {
        let windows: Vec<(u16, u8, u8)> = mcfg
            .windows
            .iter()
            .map(|w| (w.segment, w.bus_start, w.bus_end))
            .collect();
        for bridge in discovery.outside_mcfg(&windows) {
            lines.push(format!(
                "aml: disagreement: host bridge {} (segment {:04x}, buses {}) lies outside every MCFG window",
                bridge.path,
                bridge.segment,
                bridge
                    .buses
                    .map(|(a, b)| format!("{a:02x}-{b:02x}"))
                    .unwrap_or_else(|| format!("{:02x}", bridge.root_bus()))
            ));
        }
    }
    for &(segment, root) in &pci.roots {
        if discovery.bridge_for(segment, root).is_none() && !discovery.bridges.is_empty() {
            lines.push(format!(
                "aml: disagreement: root bus {segment:04x}:{root:02x} found by the scan has no AML host bridge"
            ));
        }
    }
    lines.push(format!(
        "aml: _PRT: {} table(s), each evaluated when a function first needs an INTx route from it; \
         {} device(s) with their own _PXM",
        discovery.pending_prts.len(),
        discovery.proximity.len()
    ));
    for problem in discovery.problems.iter().take(PROBLEM_LINES) {
        lines.push(format!("aml: problem: {}: {}", problem.path, problem.error));
    }
    let more = discovery.problems.len().saturating_sub(PROBLEM_LINES)
        + interp.load_problems.len().saturating_sub(PROBLEM_LINES);
    if more > 0 {
        lines.push(format!("aml: ... {more} more problem(s)"));
    }
    *NAMESPACE.lock() = Some(Namespace { interp, discovery });
    lines
}

/// The INTx route `_PRT` gives `function`, with a description of where it
/// came from for the boot log. `None`: AML has no route (fall back). The
/// first lookup in a table evaluates it, and logs its size and any problem.
pub fn intx_route(pci: &Pci, function: &PciFunction, isa_route: impl Fn(u8) -> IrqRoute) -> Option<(IrqRoute, String)> {
    let mut guard = NAMESPACE.lock();
    let Namespace { interp, discovery } = guard.as_mut()?;
    let path = aml::pci_path(&pci.functions, function)?;
    let (tables_before, problems_before) = (discovery.prts.len(), discovery.problems.len());
    let started = crate::arch::time::rdtsc();
    let found = discovery
        .route_on_demand(
            interp,
            function.address.segment(),
            function.root_bus,
            &path,
            function.interrupt_pin,
        )
        .map(|found| (found.route.clone(), found.table.scope.path.clone(), found.swizzled));
    // What the lookup's AML cost, in TSC time: read the same on a real box as under QEMU.
    let spent_us = crate::arch::time::ticks_to_ns(crate::arch::time::rdtsc().saturating_sub(started)) / 1000;
    // One table at most: the lookup stops at the first that evaluates.
    for table in &discovery.prts[tables_before..] {
        log::info!(
            "aml: _PRT of {}: {} route(s), {} unresolved (evaluated for {} in {spent_us} us)",
            table.scope.path,
            table.routes.len(),
            table.unresolved,
            function.address
        );
    }
    for problem in &discovery.problems[problems_before..] {
        log::warn!("aml: problem: {}: {}", problem.path, problem.error);
    }
    let (route, table, swizzled) = found?;
    let irq = if route.isa {
        // A legacy IRQ descriptor names an ISA IRQ: the MADT's overrides apply.
        isa_route(route.gsi as u8)
    } else {
        IrqRoute {
            gsi: route.gsi,
            active_low: route.active_low,
            level: route.level,
        }
    };
    let source = match &route.source {
        RouteSource::Gsi => "GSI".into(),
        RouteSource::Link(link) => format!("link {link}"),
    };
    let swizzle = if swizzled > 0 {
        format!(", pin swizzled across {swizzled} bridge(s)")
    } else {
        String::new()
    };
    Some((irq, format!("_PRT of {table} ({source}{swizzle})")))
}

/// The proximity domain `_PXM` gives `function` (its own device's, else its host bridge's).
pub fn proximity(pci: &Pci, function: &PciFunction) -> Option<u32> {
    let guard = NAMESPACE.lock();
    let discovery = &guard.as_ref()?.discovery;
    let path = aml::pci_path(&pci.functions, function)?;
    discovery.proximity_for(function.address.segment(), function.root_bus, &path)
}

/// The NUMA node of `function`: its `_PXM` domain's node in the SRAT.
pub fn node_of(fw: &Firmware, pci: &Pci, function: &PciFunction) -> Option<(u32, u32)> {
    let pxm = proximity(pci, function)?;
    let numa = fw.numa.as_ref()?;
    let node = numa.nodes.iter().find(|n| n.proximity_domain == pxm)?.node;
    Some((node, pxm))
}

/// Where a controller's own memory (queues, frames, rings that no one CPU
/// owns) goes: its node from `_PXM`, else the node of the CPU that probes it
/// (`None`: no SRAT, any memory). Also says which, for the boot log.
pub fn controller_node(function: &PciFunction) -> (Option<u32>, &'static str) {
    let fw = crate::arch::firmware::get();
    if let Some(pci) = crate::dev::pci::get()
        && let Some((node, _)) = node_of(fw, pci, function)
    {
        return (Some(node), "the device's _PXM");
    }
    let apic_id = crate::arch::percpu::current()
        .apic_id
        .load(core::sync::atomic::Ordering::Relaxed);
    (fw.node_of_apic_id(apic_id), "the probing CPU's node")
}
