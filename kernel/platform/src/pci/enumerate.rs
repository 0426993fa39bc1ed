//! Bus enumeration.

use alloc::vec::Vec;
use core::ops::RangeInclusive;

use pci_types::{ConfigRegionAccess, PciAddress};

use super::bar::{BarSlot, read_bars};
use super::caps::{CAP_MSI, CAP_MSIX, Capability, MAX_CAPABILITIES, walk_capabilities};
use super::config::{ConfigSpace, INTERRUPT_LINE};
use super::msi::{MsiCapability, MsixCapability};
use crate::error::{Error, Result};

/// Non-fatal problems kept per function (further ones are dropped).
const MAX_PROBLEMS: usize = 4;

/// Header layout of a function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderKind {
    /// Type 0: an endpoint with six BARs.
    Endpoint,
    /// Type 1: a PCI-to-PCI bridge with two BARs and bus numbers.
    Bridge {
        /// Bus the bridge sits on.
        primary: u8,
        /// Bus directly behind it.
        secondary: u8,
        /// Highest bus behind it.
        subordinate: u8,
    },
    /// Type 2: a CardBus bridge (not walked further).
    CardBus,
    /// Any other header type (its body is not interpreted).
    Unknown(u8),
}

/// Everything enumeration learned about one function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PciFunction {
    /// Segment/bus/device/function.
    pub address: PciAddress,
    /// Vendor id.
    pub vendor_id: u16,
    /// Device id.
    pub device_id: u16,
    /// Revision id.
    pub revision: u8,
    /// Base class.
    pub class: u8,
    /// Subclass.
    pub subclass: u8,
    /// Programming interface.
    pub prog_if: u8,
    /// Header layout.
    pub header: HeaderKind,
    /// Header type bit 7 (only meaningful on function 0).
    pub multifunction: bool,
    /// Subsystem (vendor, device), endpoints only.
    pub subsystem: Option<(u16, u16)>,
    /// Interrupt line assigned by firmware (0xFF: none).
    pub interrupt_line: u8,
    /// Interrupt pin: 0 none, 1..=4 INTA..INTD.
    pub interrupt_pin: u8,
    /// BARs, decoded and sized.
    pub bars: [BarSlot; 6],
    /// Capability list in list order.
    pub capabilities: heapless::Vec<Capability, MAX_CAPABILITIES>,
    /// MSI capability, if listed and well-formed.
    pub msi: Option<MsiCapability>,
    /// MSI-X capability, if listed and well-formed.
    pub msix: Option<MsixCapability>,
    /// Malformed BARs or capabilities found while reading (the function is still listed).
    pub problems: heapless::Vec<Error, MAX_PROBLEMS>,
    /// Set by [`super::ResourcePlan::mark_refused`]: the function must not be
    /// used (no driver matches it), and why.
    pub refused: Option<Error>,
    /// The root bus the function sits under: the bus the scan started from
    /// (through bridges), or the function's own bus when it was not reached
    /// through a bridge ([`ScanMode::AllBuses`], or [`read_function`] alone).
    pub root_bus: u8,
}

impl PciFunction {
    /// Whether a capability with `id` is listed.
    pub fn has_capability(&self, id: u8) -> bool {
        self.capabilities.iter().any(|capability| capability.id == id)
    }

    /// The BAR in slot `slot`, if one is there.
    pub fn bar(&self, slot: u8) -> Option<&super::Bar> {
        self.bars.get(usize::from(slot)).and_then(BarSlot::bar)
    }
}

/// How buses are found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScanMode {
    /// Start at the first bus of the range and follow each bridge's secondary
    /// bus number (as assigned by firmware); if 00:00.0 is a multi-function
    /// host bridge, function N is the host bridge of bus N. Each bus is
    /// scanned once, so a bridge loop cannot recurse.
    FollowBridges,
    /// Probe every bus in the range (finds buses behind host bridges that
    /// are not described by the above, at 32 probes per empty bus).
    AllBuses,
    /// Every root bus of the range: buses are taken in increasing order, and
    /// each one not yet reached through a bridge from a lower root is scanned;
    /// if anything answers there, it is a root bus (a server's other host
    /// bridges, QEMU's `pxb-pcie`) and its tree is followed as in
    /// [`ScanMode::FollowBridges`] before the next bus is looked at. Costs
    /// 32 probes per empty bus, like [`ScanMode::AllBuses`].
    EveryRoot,
}

fn is_absent(id: u32) -> bool {
    // All-ones is the master-abort value; some bridges return zeros or half of each.
    matches!(id, 0xFFFF_FFFF | 0 | 0x0000_FFFF | 0xFFFF_0000)
}

/// Reads one function: identity, header, BARs (sized with decoding off),
/// capabilities, MSI/MSI-X. Returns `Ok(None)` when nothing answers there.
/// Malformed BARs/capabilities are recorded in `problems`, not returned.
pub fn read_function<A: ConfigRegionAccess + ?Sized>(access: &A, address: PciAddress) -> Result<Option<PciFunction>> {
    let cfg = ConfigSpace::new(access, address);
    let id = cfg.read32(0x00)?;
    if is_absent(id) {
        return Ok(None);
    }
    let class_dword = cfg.read32(0x08)?;
    let header_type = cfg.read8(0x0E)?;
    let interrupt = cfg.read32(INTERRUPT_LINE)?;
    let (header, bar_count, subsystem) = match header_type & 0x7F {
        0 => {
            let subsystem = cfg.read32(0x2C)?;
            (
                HeaderKind::Endpoint,
                6,
                Some((subsystem as u16, (subsystem >> 16) as u16)),
            )
        }
        1 => {
            let buses = cfg.read32(0x18)?;
            let bridge = HeaderKind::Bridge {
                primary: buses as u8,
                secondary: (buses >> 8) as u8,
                subordinate: (buses >> 16) as u8,
            };
            (bridge, 2, None)
        }
        2 => (HeaderKind::CardBus, 0, None),
        other => (HeaderKind::Unknown(other), 0, None),
    };
    let mut problems = heapless::Vec::new();
    let bars = if bar_count > 0 {
        let (bars, bar_problems) = read_bars(access, address, bar_count)?;
        for problem in bar_problems {
            let _ = problems.push(problem);
        }
        bars
    } else {
        [BarSlot::Unused; 6]
    };
    let capabilities = match header {
        HeaderKind::Unknown(_) => heapless::Vec::new(),
        _ => walk_capabilities(access, address, header_type).unwrap_or_else(|error| {
            let _ = problems.push(error);
            heapless::Vec::new()
        }),
    };
    let mut msi = None;
    let mut msix = None;
    for capability in &capabilities {
        match capability.id {
            CAP_MSI if msi.is_none() => match MsiCapability::parse(access, address, capability.offset) {
                Ok(parsed) => msi = Some(parsed),
                Err(error) => {
                    let _ = problems.push(error);
                }
            },
            CAP_MSIX if msix.is_none() => match MsixCapability::parse(access, address, capability.offset) {
                Ok(parsed) => msix = Some(parsed),
                Err(error) => {
                    let _ = problems.push(error);
                }
            },
            _ => {}
        }
    }
    Ok(Some(PciFunction {
        address,
        vendor_id: id as u16,
        device_id: (id >> 16) as u16,
        revision: class_dword as u8,
        prog_if: (class_dword >> 8) as u8,
        subclass: (class_dword >> 16) as u8,
        class: (class_dword >> 24) as u8,
        header,
        multifunction: header_type & 0x80 != 0,
        subsystem,
        interrupt_line: interrupt as u8,
        interrupt_pin: (interrupt >> 8) as u8,
        bars,
        capabilities,
        msi,
        msix,
        problems,
        refused: None,
        root_bus: address.bus(),
    }))
}

/// Enumerates `segment`, buses `buses`, and returns the functions sorted by
/// address. Errors only if the access rejects an offset (it cannot for
/// standard-space offsets); device-supplied garbage is recorded per function.
pub fn enumerate<A: ConfigRegionAccess + ?Sized>(
    access: &A,
    segment: u16,
    buses: RangeInclusive<u8>,
    mode: ScanMode,
) -> Result<Vec<PciFunction>> {
    let mut scan = Scan {
        access,
        segment,
        buses: buses.clone(),
        mode,
        queued: [0; 4],
        pending: heapless::Vec::new(),
        next: 0,
        functions: Vec::new(),
    };
    match mode {
        ScanMode::AllBuses => {
            for bus in buses {
                scan.enqueue(bus, bus);
            }
            scan.drain()?;
        }
        ScanMode::FollowBridges => {
            scan.enqueue(*buses.start(), *buses.start());
            scan.drain()?;
        }
        ScanMode::EveryRoot => {
            // A bus reached from a lower root is queued (and scanned) while
            // that root is drained, so only unreached buses start a root here.
            for bus in buses {
                scan.enqueue(bus, bus);
                scan.drain()?;
            }
        }
    }
    let mut functions = scan.functions;
    functions.sort_by_key(|function| function.address);
    Ok(functions)
}

/// The root buses among `functions` (as [`enumerate`] marked them), in
/// increasing order, without repeats.
pub fn root_buses(functions: &[PciFunction]) -> Vec<(u16, u8)> {
    let mut roots: Vec<(u16, u8)> = functions
        .iter()
        .map(|function| (function.address.segment(), function.root_bus))
        .collect();
    roots.sort_unstable();
    roots.dedup();
    roots
}

/// State of one [`enumerate`] call: which buses were queued (each once, so
/// a bridge loop cannot recurse) and under which root.
struct Scan<'a, A: ConfigRegionAccess + ?Sized> {
    access: &'a A,
    segment: u16,
    buses: RangeInclusive<u8>,
    mode: ScanMode,
    queued: [u64; 4],
    /// Buses to scan, each with its root bus.
    pending: heapless::Vec<(u8, u8), 256>,
    next: usize,
    functions: Vec<PciFunction>,
}

impl<A: ConfigRegionAccess + ?Sized> Scan<'_, A> {
    fn enqueue(&mut self, bus: u8, root: u8) {
        let bit = usize::from(bus);
        if self.buses.contains(&bus) && self.queued[bit / 64] & (1 << (bit % 64)) == 0 {
            self.queued[bit / 64] |= 1 << (bit % 64);
            // Cannot overflow: each of the 256 buses is queued at most once.
            let _ = self.pending.push((bus, root));
        }
    }

    /// Scans every queued bus, queueing the buses found behind bridges.
    fn drain(&mut self) -> Result<()> {
        let follow = matches!(self.mode, ScanMode::FollowBridges | ScanMode::EveryRoot);
        while let Some(&(bus, root)) = self.pending.get(self.next) {
            self.next += 1;
            for device in 0..32u8 {
                let Some(first) = read_function(self.access, PciAddress::new(self.segment, bus, device, 0))? else {
                    continue;
                };
                let function_count = if first.multifunction { 8 } else { 1 };
                let mut found = Some(first);
                for function in 0..function_count {
                    let current = match found.take() {
                        Some(current) => Some(current),
                        None => read_function(self.access, PciAddress::new(self.segment, bus, device, function))?,
                    };
                    let Some(mut current) = current else { continue };
                    current.root_bus = root;
                    if follow {
                        if let HeaderKind::Bridge { secondary, .. } = current.header
                            && secondary > bus
                        {
                            self.enqueue(secondary, root);
                        }
                        // The old multi-host-bridge convention: function N of
                        // 00:00 is the host bridge of bus N, its own root.
                        let is_host_bridge = current.class == 0x06 && current.subclass == 0x00;
                        if bus == *self.buses.start() && device == 0 && function > 0 && is_host_bridge {
                            self.enqueue(function, function);
                        }
                    }
                    self.functions.push(current);
                }
            }
        }
        Ok(())
    }
}

/// The root buses of `segment` in `buses`, in increasing order: the buses
/// [`ScanMode::EveryRoot`] would start a tree at. Reads only identity,
/// header type and bus-number registers (no BAR sizing), so it can run
/// before resource assignment, e.g. to keep bus numbering for bus 00's tree
/// below the next root bus.
pub fn find_root_buses<A: ConfigRegionAccess + ?Sized>(
    access: &A,
    segment: u16,
    buses: RangeInclusive<u8>,
) -> Result<Vec<u8>> {
    let mut queued = [0u64; 4];
    let mut roots = Vec::new();
    let mark = |bus: u8, queued: &mut [u64; 4]| -> bool {
        let bit = usize::from(bus);
        let fresh = queued[bit / 64] & (1 << (bit % 64)) == 0;
        queued[bit / 64] |= 1 << (bit % 64);
        fresh
    };
    for seed in buses.clone() {
        if !mark(seed, &mut queued) {
            continue;
        }
        let mut pending = alloc::vec![seed];
        let mut answered = false;
        while let Some(bus) = pending.pop() {
            for device in 0..32u8 {
                // Function 0 says whether functions 1-7 exist (the multi-function bit).
                let mut function_count = 1;
                for function in 0..8u8 {
                    if function >= function_count {
                        break;
                    }
                    let cfg = ConfigSpace::new(access, PciAddress::new(segment, bus, device, function));
                    if is_absent(cfg.read32(0x00)?) {
                        continue;
                    }
                    answered = true;
                    let header_type = cfg.read8(0x0E)?;
                    if function == 0 && header_type & 0x80 != 0 {
                        function_count = 8;
                    }
                    if header_type & 0x7F == 1 {
                        let secondary = (cfg.read32(0x18)? >> 8) as u8;
                        if secondary > bus && buses.contains(&secondary) && mark(secondary, &mut queued) {
                            pending.push(secondary);
                        }
                    }
                }
            }
        }
        if answered {
            roots.push(seed);
        }
    }
    Ok(roots)
}

/// Refuses what baremq must not touch outside the tree it lays out
/// (`laid_out`: segment and root bus of [`super::assign_resources`], `None`:
/// nothing was laid out): under any other root, firmware assignments are
/// kept as they are, so a function with an unassigned memory BAR
/// ([`Error::UnassignedUnderOtherRoot`]) and a bridge without usable bus
/// numbers ([`Error::BridgeNotNumberedUnderOtherRoot`]) are refused (listed,
/// never probed). A function already refused keeps its first reason.
pub fn refuse_outside_laid_out_tree(functions: &mut [PciFunction], laid_out: Option<(u16, u8)>) {
    for function in functions {
        let root = function.root_bus;
        if function.refused.is_some() || laid_out == Some((function.address.segment(), root)) {
            continue;
        }
        if let HeaderKind::Bridge {
            secondary, subordinate, ..
        } = function.header
            && (secondary <= function.address.bus() || subordinate < secondary)
        {
            function.refused = Some(Error::BridgeNotNumberedUnderOtherRoot {
                bridge: function.address,
                root,
            });
            continue;
        }
        let unassigned = function
            .bars
            .iter()
            .filter_map(BarSlot::bar)
            .find(|bar| bar.is_memory() && bar.address == 0);
        if let Some(bar) = unassigned {
            function.refused = Some(Error::UnassignedUnderOtherRoot {
                address: function.address,
                slot: bar.slot,
                root,
            });
        }
    }
}
