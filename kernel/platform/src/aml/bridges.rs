//! What baremq asks the namespace: the PCI host bridges under `\_SB`, with
//! their segment, root bus, windows and proximity domain, the `_PRT`
//! interrupt routes of each root bus and of the bridges below it, and the
//! `_PXM` of devices below them.

use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec::Vec;

use super::interp::{Interpreter, aml_error};
use super::name::Path;
use super::object::Object;
use super::resource::{self, Window, WindowKind};
use crate::error::Error;

/// One PCI host bridge (`PNP0A03`/`PNP0A08`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostBridge {
    pub path: Path,
    /// `PNP0A08` (PCI Express) or `PNP0A03`.
    pub id: String,
    /// `_UID`: an integer (in decimal) or a string.
    pub uid: Option<String>,
    /// `_SEG` (0 when absent).
    pub segment: u16,
    /// `_BBN`, when present.
    pub bbn: Option<u8>,
    /// Bus range from `_CRS`, when it has a bus-number descriptor.
    pub buses: Option<(u8, u8)>,
    /// Memory and I/O windows from `_CRS`.
    pub windows: Vec<Window>,
    /// `_PXM`, when present.
    pub pxm: Option<u32>,
}

impl HostBridge {
    /// The root bus: `_CRS`'s first bus, else `_BBN`, else 0 (as Linux).
    pub fn root_bus(&self) -> u8 {
        self.buses.map(|(first, _)| first).or(self.bbn).unwrap_or(0)
    }
}

/// Where a `_PRT` applies: a host bridge's root bus, or the secondary bus of
/// the bridge reached by following `hops` (device, function) from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrtScope {
    /// Index into [`Discovery::bridges`].
    pub bridge: usize,
    /// (device, function) of each PCI bridge from the root bus down; empty for the root bus.
    pub hops: Vec<(u8, u8)>,
    pub path: Path,
}

/// Where a route's interrupt comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteSource {
    /// Source 0: the GSI is the entry's source index.
    Gsi,
    /// An interrupt link device, read through its `_CRS`.
    Link(Path),
}

/// One `_PRT` entry, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrtRoute {
    pub device: u8,
    /// 0..=3 = INTA..INTD.
    pub pin: u8,
    pub gsi: u32,
    pub level: bool,
    pub active_low: bool,
    /// Came from a legacy IRQ descriptor (an ISA IRQ: apply MADT overrides).
    pub isa: bool,
    pub source: RouteSource,
}

/// A `_PRT` table and its resolved routes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrtTable {
    pub scope: PrtScope,
    pub routes: Vec<PrtRoute>,
    /// Entries that could not be resolved (a disabled or unreadable link).
    pub unresolved: usize,
}

/// `_PXM` of a device below a host bridge (other than the bridge's own).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceProximity {
    pub scope: PrtScope,
    /// (device, function) from `_ADR`.
    pub function: (u8, u8),
    pub pxm: u32,
}

/// A problem met while evaluating: the object and the error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub path: Path,
    pub error: Error,
}

/// A link device's interrupt (its `_CRS`, by source index), read once for all tables.
type LinkCache = BTreeMap<(Path, u64), Option<resource::Interrupt>>;

/// Everything found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Discovery {
    pub bridges: Vec<HostBridge>,
    /// Tables evaluated so far, in the order they were evaluated.
    pub prts: Vec<PrtTable>,
    /// Scopes whose `_PRT` exists and has not been evaluated yet (see [`discover_deferred`]).
    pub pending_prts: Vec<PrtScope>,
    pub proximity: Vec<DeviceProximity>,
    pub problems: Vec<Problem>,
    /// Host bridges whose `_STA` says absent (skipped).
    pub absent: usize,
    /// Host bridges whose `_STA` failed (skipped; the problem is in `problems`).
    pub failed: usize,
    links: LinkCache,
}

impl Discovery {
    /// Routes in all tables.
    pub fn route_count(&self) -> usize {
        self.prts.iter().map(|t| t.routes.len()).sum()
    }
}

fn integer(interp: &mut Interpreter<'_>, path: &Path, problems: &mut Vec<Problem>) -> Option<u64> {
    match interp.evaluate_integer(path) {
        Ok(v) => v,
        Err(error) => {
            problems.push(Problem {
                path: path.clone(),
                error,
            });
            None
        }
    }
}

/// `value` as the narrower field it fills, when it is at most `max`: a
/// 16-bit segment, an 8-bit bus, a 32-bit proximity domain or GSI, a device
/// number (31) or a pin (3). A value past that is a problem at `path`, and
/// no value (never truncated).
fn within<T: TryFrom<u64>>(
    value: u64,
    max: u64,
    path: &Path,
    what: &'static str,
    problems: &mut Vec<Problem>,
) -> Option<T> {
    let fits = (value <= max).then(|| T::try_from(value).ok()).flatten();
    if fits.is_none() {
        problems.push(Problem {
            path: path.clone(),
            error: aml_error(path, 0, what, value),
        });
    }
    fits
}

/// The integer at `path`, when it evaluates and is at most `max` (see [`within`]).
fn narrow<T: TryFrom<u64>>(
    interp: &mut Interpreter<'_>,
    path: &Path,
    max: u64,
    what: &'static str,
    problems: &mut Vec<Problem>,
) -> Option<T> {
    integer(interp, path, problems).and_then(|value| within(value, max, path, what, problems))
}

fn uid(interp: &mut Interpreter<'_>, path: &Path, problems: &mut Vec<Problem>) -> Option<String> {
    if !interp.exists(path) {
        return None;
    }
    match interp.evaluate(path, Vec::new()) {
        Ok(Object::Integer(v)) => Some(alloc::format!("{v}")),
        Ok(Object::String(s)) => Some(s),
        Ok(_) => None,
        Err(error) => {
            problems.push(Problem {
                path: path.clone(),
                error,
            });
            None
        }
    }
}

/// `_ADR` as (device, function).
fn adr(interp: &mut Interpreter<'_>, device: &Path, problems: &mut Vec<Problem>) -> Option<(u8, u8)> {
    let value = integer(interp, &device.child(*b"_ADR"), problems)?;
    Some((((value >> 16) & 0x1F) as u8, (value & 7) as u8))
}

/// Evaluates the namespace, every `_PRT` included: [`discover_deferred`],
/// then each pending table in namespace order.
pub fn discover(interp: &mut Interpreter<'_>) -> Discovery {
    let mut out = discover_deferred(interp);
    while !out.pending_prts.is_empty() {
        out.evaluate_prt(interp, 0);
    }
    out
}

/// Evaluates what a boot needs up front: calls `\_PIC(1)` first (APIC mode:
/// firmware returns its I/O APIC routing), then finds the host bridges and
/// the `_PXM` of devices below them. `_PRT` tables are only located (in
/// [`Discovery::pending_prts`]): building one can take thousands of steps
/// (QEMU's `pc` builds 128 entries in a loop), and only a function that
/// falls back to INTx needs one ([`Discovery::route_on_demand`]).
pub fn discover_deferred(interp: &mut Interpreter<'_>) -> Discovery {
    let mut out = Discovery::default();
    let pic = Path::root().child(*b"_PIC");
    if interp.exists(&pic)
        && let Err(error) = interp.evaluate(&pic, alloc::vec![Object::Integer(1)])
    {
        out.problems.push(Problem { path: pic, error });
    }
    let devices = interp.devices();
    let mut bridge_paths: Vec<Path> = Vec::new();
    for device in &devices {
        // A host bridge below another one is a PCI device that happens to claim the id; skip it.
        if bridge_paths.iter().any(|b| device.is_below(b)) || !interp.is_host_bridge(device) {
            continue;
        }
        // A bridge whose _STA fails is not used (its problem is reported): its
        // status is unknown, and it would shadow the real one for its root bus.
        let sta = device.child(*b"_STA");
        let problems_before = out.problems.len();
        let status = integer(interp, &sta, &mut out.problems);
        if out.problems.len() > problems_before {
            out.failed += 1;
            continue;
        }
        if status.is_some_and(|status| status & 1 == 0) {
            out.absent += 1;
            continue;
        }
        bridge_paths.push(device.clone());
        let ids = interp.ids(device);
        let id = ids
            .iter()
            .find(|i| *i == "PNP0A08")
            .or_else(|| ids.iter().find(|i| *i == "PNP0A03"))
            .cloned()
            .unwrap_or_default();
        let mut bridge = HostBridge {
            path: device.clone(),
            id,
            uid: uid(interp, &device.child(*b"_UID"), &mut out.problems),
            segment: narrow(
                interp,
                &device.child(*b"_SEG"),
                0xFFFF,
                "_SEG above 0xFFFF",
                &mut out.problems,
            )
            .unwrap_or(0),
            bbn: narrow(
                interp,
                &device.child(*b"_BBN"),
                0xFF,
                "_BBN above bus 255",
                &mut out.problems,
            ),
            buses: None,
            windows: Vec::new(),
            pxm: narrow(
                interp,
                &device.child(*b"_PXM"),
                u32::MAX.into(),
                "_PXM above 32 bits",
                &mut out.problems,
            ),
        };
        let crs = device.child(*b"_CRS");
        if interp.exists(&crs) {
            match interp.evaluate(&crs, Vec::new()).and_then(|v| match v {
                Object::Buffer(bytes) => resource::parse(&bytes),
                _ => Err(Error::Aml {
                    at: crate::error::Token::new("_CRS"),
                    offset: 0,
                    what: "_CRS is not a buffer",
                    value: 0,
                }),
            }) {
                Ok(resources) => {
                    for window in resources.windows {
                        match window.kind {
                            WindowKind::BusNumbers if bridge.buses.is_none() => {
                                let first = window.start.min(255) as u8;
                                bridge.buses = Some((first, window.end().min(255) as u8));
                            }
                            WindowKind::BusNumbers => {}
                            _ => bridge.windows.push(window),
                        }
                    }
                }
                Err(error) => out.problems.push(Problem { path: crs, error }),
            }
        }
        out.bridges.push(bridge);
    }

    for (index, bridge_path) in bridge_paths.iter().enumerate() {
        // The bridge itself, then each device below it, in namespace order.
        let mut scopes: Vec<Path> = alloc::vec![bridge_path.clone()];
        scopes.extend(devices.iter().filter(|d| d.is_below(bridge_path)).cloned());
        for scope_path in scopes {
            let prt_path = scope_path.child(*b"_PRT");
            let pxm_path = scope_path.child(*b"_PXM");
            let has_prt = interp.exists(&prt_path);
            let has_pxm = scope_path != *bridge_path && interp.exists(&pxm_path);
            if !has_prt && !has_pxm {
                continue;
            }
            let Some(hops) = hops_to(interp, bridge_path, &scope_path, &mut out.problems) else {
                continue;
            };
            let scope = PrtScope {
                bridge: index,
                hops,
                path: scope_path.clone(),
            };
            if has_pxm
                && let Some(pxm) = narrow(
                    interp,
                    &pxm_path,
                    u32::MAX.into(),
                    "_PXM above 32 bits",
                    &mut out.problems,
                )
                && let Some(function) = adr(interp, &scope_path, &mut out.problems)
            {
                let mut parent = scope.clone();
                parent.hops.pop();
                parent.path = scope_path.parent();
                out.proximity.push(DeviceProximity {
                    scope: parent,
                    function,
                    pxm,
                });
            }
            if has_prt {
                out.pending_prts.push(scope);
            }
        }
    }
    out
}

/// (device, function) of each device from below the bridge down to `scope`
/// (inclusive); `None` when one of them has no `_ADR`.
fn hops_to(
    interp: &mut Interpreter<'_>,
    bridge: &Path,
    scope: &Path,
    problems: &mut Vec<Problem>,
) -> Option<Vec<(u8, u8)>> {
    let mut hops = Vec::new();
    for depth in bridge.0.len() + 1..=scope.0.len() {
        let node = Path(scope.0[..depth].to_vec());
        if !interp.exists(&node.child(*b"_ADR")) {
            return None;
        }
        hops.push(adr(interp, &node, problems)?);
    }
    Some(hops)
}

fn prt_table(
    interp: &mut Interpreter<'_>,
    scope: PrtScope,
    value: Object,
    links: &mut LinkCache,
    problems: &mut Vec<Problem>,
) -> PrtTable {
    let mut table = PrtTable {
        scope,
        routes: Vec::new(),
        unresolved: 0,
    };
    let Object::Package(entries) = value else {
        problems.push(Problem {
            path: table.scope.path.child(*b"_PRT"),
            error: Error::Aml {
                at: crate::error::Token::new("_PRT"),
                offset: 0,
                what: "_PRT is not a package",
                value: 0,
            },
        });
        return table;
    };
    for entry in entries {
        let Object::Package(fields) = entry else {
            table.unresolved += 1;
            continue;
        };
        let (Some(Object::Integer(address)), Some(Object::Integer(pin))) = (fields.first(), fields.get(1)) else {
            table.unresolved += 1;
            continue;
        };
        let index = match fields.get(3) {
            Some(Object::Integer(i)) => *i,
            _ => 0,
        };
        // Address 0xDDDD_FFFF names device DDDD (0..=31); pins are 0..=3 (INTA..INTD).
        let prt_path = table.scope.path.child(*b"_PRT");
        let device = within(address >> 16, 31, &prt_path, "_PRT device number above 31", problems);
        let pin = within(*pin, 3, &prt_path, "_PRT pin above 3 (INTD)", problems);
        let (Some(device), Some(pin)) = (device, pin) else {
            table.unresolved += 1;
            continue;
        };
        let source = match fields.get(2) {
            Some(Object::Integer(0)) | None => None,
            Some(Object::Name(path)) => Some(path.clone()),
            Some(Object::LazyName { name, scope }) => match interp.resolve(name, scope) {
                Some(path) => Some(path),
                None => {
                    table.unresolved += 1;
                    continue;
                }
            },
            Some(Object::String(text)) => Path::parse(text),
            Some(Object::Reference(_)) | Some(_) => {
                table.unresolved += 1;
                continue;
            }
        };
        let route = match source {
            None => within(index, u32::MAX.into(), &prt_path, "_PRT GSI above 32 bits", problems).map(|gsi| PrtRoute {
                device,
                pin,
                gsi,
                level: true,
                active_low: true,
                isa: false,
                source: RouteSource::Gsi,
            }),
            Some(link) => {
                let interrupt = *links
                    .entry((link.clone(), index))
                    .or_insert_with(|| link_interrupt(interp, &link, index, problems));
                interrupt.map(|irq| PrtRoute {
                    device,
                    pin,
                    gsi: irq.number,
                    level: irq.level,
                    active_low: irq.active_low,
                    isa: irq.isa,
                    source: RouteSource::Link(link),
                })
            }
        };
        match route {
            Some(route) => table.routes.push(route),
            None => table.unresolved += 1,
        }
    }
    table
}

/// Interrupt `index` (the `_PRT` entry's source index, usually 0) of those a
/// link device's `_CRS` names (its current setting). An IRQ of 0 (legacy
/// descriptor with an empty mask, or number 0) is a disabled link.
fn link_interrupt(
    interp: &mut Interpreter<'_>,
    link: &Path,
    index: u64,
    problems: &mut Vec<Problem>,
) -> Option<resource::Interrupt> {
    let crs = link.child(*b"_CRS");
    let value = match interp.evaluate(&crs, Vec::new()) {
        Ok(v) => v,
        Err(error) => {
            problems.push(Problem { path: crs, error });
            return None;
        }
    };
    let Object::Buffer(bytes) = value else {
        return None;
    };
    match resource::parse(&bytes) {
        Ok(resources) => usize::try_from(index)
            .ok()
            .and_then(|i| resources.interrupts.get(i).copied())
            .filter(|irq| irq.number != 0),
        Err(error) => {
            problems.push(Problem { path: crs, error });
            None
        }
    }
}

/// Where a `_PRT` route was found for a function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundRoute<'a> {
    pub route: &'a PrtRoute,
    pub table: &'a PrtTable,
    /// Bridges crossed without a `_PRT` of their own (the pin was swizzled at each).
    pub swizzled: usize,
}

impl Discovery {
    /// Evaluates the pending `_PRT` of `pending_prts[pending]` and moves it
    /// to [`Discovery::prts`]; a table that fails to evaluate is dropped (its
    /// problem is in `problems`), as if the scope had none.
    pub fn evaluate_prt(&mut self, interp: &mut Interpreter<'_>, pending: usize) {
        let scope = self.pending_prts.remove(pending);
        let prt_path = scope.path.child(*b"_PRT");
        match interp.evaluate(&prt_path, Vec::new()) {
            Ok(value) => {
                let table = prt_table(interp, scope, value, &mut self.links, &mut self.problems);
                self.prts.push(table);
            }
            Err(error) => self.problems.push(Problem { path: prt_path, error }),
        }
    }

    /// [`Discovery::route_for`], first evaluating the pending tables the
    /// lookup may need: the table of each scope on the way up from the
    /// function, nearest first, until one exists.
    pub fn route_on_demand(
        &mut self,
        interp: &mut Interpreter<'_>,
        segment: u16,
        root_bus: u8,
        path: &[(u8, u8)],
        pin: u8,
    ) -> Option<FoundRoute<'_>> {
        let bridge = self.bridge_for(segment, root_bus)?;
        // No pin, no route: nothing to evaluate.
        if !(1..=4).contains(&pin) {
            return None;
        }
        for depth in (0..path.len()).rev() {
            let hops = &path[..depth];
            if self
                .prts
                .iter()
                .any(|t| t.scope.bridge == bridge && t.scope.hops == hops)
            {
                break;
            }
            if let Some(pending) = self
                .pending_prts
                .iter()
                .position(|s| s.bridge == bridge && s.hops == hops)
            {
                self.evaluate_prt(interp, pending);
                if self
                    .prts
                    .last()
                    .is_some_and(|t| t.scope.bridge == bridge && t.scope.hops == hops)
                {
                    break;
                }
            }
        }
        self.route_for(segment, root_bus, path, pin)
    }

    /// The host bridge whose root bus is `root_bus` in `segment`.
    pub fn bridge_for(&self, segment: u16, root_bus: u8) -> Option<usize> {
        self.bridges
            .iter()
            .position(|b| b.segment == segment && b.root_bus() == root_bus)
    }

    /// The `_PRT` route of INTx `pin` (1..=4) of the function reached from
    /// root bus `root_bus` of `segment` through `path`: the (device, function)
    /// of each PCI bridge crossed, then the function's own. The nearest
    /// `_PRT` above the function is used; each bridge crossed without one
    /// swizzles the pin (PCI-to-PCI bridge specification: pin + device, mod 4).
    /// `None`: no host bridge, no `_PRT` up to the root, or the nearest table
    /// has no entry for the device and pin.
    pub fn route_for(&self, segment: u16, root_bus: u8, path: &[(u8, u8)], pin: u8) -> Option<FoundRoute<'_>> {
        let bridge = self.bridge_for(segment, root_bus)?;
        if !(1..=4).contains(&pin) || path.is_empty() {
            return None;
        }
        let mut pin0 = pin - 1;
        for (swizzled, depth) in (0..path.len()).rev().enumerate() {
            let device = path[depth].0;
            let hops = &path[..depth];
            if let Some(table) = self
                .prts
                .iter()
                .find(|t| t.scope.bridge == bridge && t.scope.hops == hops)
            {
                return table
                    .routes
                    .iter()
                    .find(|r| r.device == device && r.pin == pin0)
                    .map(|route| FoundRoute { route, table, swizzled });
            }
            // The caller's device number may be any u8: add in a wider type.
            pin0 = ((u16::from(pin0) + u16::from(device)) % 4) as u8;
        }
        None
    }

    /// The proximity domain of the function reached through `path` (as in
    /// [`Discovery::route_for`]): the `_PXM` of the deepest device on the way
    /// that has one, else its host bridge's.
    pub fn proximity_for(&self, segment: u16, root_bus: u8, path: &[(u8, u8)]) -> Option<u32> {
        let bridge = self.bridge_for(segment, root_bus)?;
        for depth in (0..path.len()).rev() {
            let hops = &path[..depth];
            if let Some(found) = self
                .proximity
                .iter()
                .find(|p| p.scope.bridge == bridge && p.scope.hops == hops && p.function == path[depth])
            {
                return Some(found.pxm);
            }
        }
        self.bridges[bridge].pxm
    }

    /// Host bridges whose bus range (from `_CRS`, else the root bus) no MCFG
    /// window of their segment covers: their configuration space is not
    /// reachable by ECAM. `windows`: (segment, first bus, last bus) of each.
    pub fn outside_mcfg(&self, windows: &[(u16, u8, u8)]) -> Vec<&HostBridge> {
        self.bridges
            .iter()
            .filter(|b| {
                let (first, last) = b.buses.unwrap_or((b.root_bus(), b.root_bus()));
                !windows
                    .iter()
                    .any(|&(segment, start, end)| segment == b.segment && start <= first && last <= end)
            })
            .collect()
    }
}
