//! Resource assignment: bus numbers, bridge windows and BARs for functions
//! the firmware left unassigned (qboot assigns no BARs at all), including
//! functions behind PCI-to-PCI bridges.
//!
//! [`plan_resources`] walks the tree from the root bus, numbering bridges
//! that have no (or impossible) bus numbers, sizes every BAR (with decoding
//! off, see [`super::read_bars`]), and computes where everything goes:
//!
//! * Root-bus BARs the firmware assigned stay where they are; unassigned ones
//!   are placed in the free part of [`ResourceWindows::memory`] (the 32-bit
//!   PCI hole) or [`ResourceWindows::io`].
//! * A bridge whose memory or prefetchable window the firmware opened (base
//!   != 0 and base <= limit) keeps its subtree as the firmware left it; a
//!   function below it with an unassigned memory BAR is refused. Both windows
//!   are kept clear of everything the plan places.
//! * A bridge with both windows closed is *owned*: every BAR below it (nested
//!   bridges included) is laid out afresh, largest alignment first, and each
//!   bridge window is rounded to 1 MiB (memory) or 4 KiB (I/O) and aligned
//!   to at least that. The prefetchable window is closed: 64-bit BARs behind
//!   a bridge are placed below 4 GiB too.
//! * When something does not fit, the function with the largest BAR in the
//!   failing request is refused ([`Error::BarDoesNotFit`]) and the plan is
//!   recomputed without it, so one huge BAR does not sink its neighbours.
//!   I/O BARs that do not fit are only left off ([`ResourcePlan::left_off`]):
//!   baremq's drivers use memory BARs.
//!
//! Planning writes only bus numbers (needed to see behind a bridge) and the
//! BAR probes, which are restored. [`apply_plan`] then programs the BARs and
//! bridge windows, enables memory/I/O decoding and bus mastering on the
//! bridges in use, and turns decoding and bus mastering off on refused
//! functions. [`assign_resources`] does both. A refused function must never
//! be probed: [`ResourcePlan::mark_refused`] copies the refusals into the
//! enumerated functions, and [`super::DeviceMatch::matches`] (so [`super::match_driver`]) matches no
//! refused one.

use alloc::vec::Vec;
use core::ops::{Range, RangeInclusive};

use pci_types::{CommandRegister, ConfigRegionAccess, PciAddress};

use super::bar::{BarKind, BarSlot};
use super::config::ConfigSpace;
use super::enumerate::{HeaderKind, PciFunction, read_function};
use crate::error::{Error, Result};

/// Bridge memory windows are 1 MiB granular.
pub const MEMORY_WINDOW_GRANULARITY: u64 = 1 << 20;
/// Bridge I/O windows are 4 KiB granular.
pub const IO_WINDOW_GRANULARITY: u64 = 1 << 12;

/// Bus numbers register (primary, secondary, subordinate, latency timer).
const BRIDGE_BUSES: u16 = 0x18;
/// I/O base and limit bytes (upper half: secondary status, write-one-to-clear).
const BRIDGE_IO: u16 = 0x1C;
/// Memory base and limit.
const BRIDGE_MEMORY: u16 = 0x20;
/// Prefetchable memory base and limit, then their upper 32 bits.
const BRIDGE_PREFETCH: u16 = 0x24;
const BRIDGE_PREFETCH_BASE_UPPER: u16 = 0x28;
const BRIDGE_PREFETCH_LIMIT_UPPER: u16 = 0x2C;
/// I/O base and limit upper 16 bits.
const BRIDGE_IO_UPPER: u16 = 0x30;

/// Address ranges the plan may use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceWindows {
    /// Memory for BARs and bridge windows, e.g. the 32-bit PCI hole
    /// `[max(RAM top, ECAM end), 0xFEC0_0000)`. Must end at or below 4 GiB
    /// (bridge memory windows are 32-bit).
    pub memory: Range<u64>,
    /// I/O ports for I/O BARs and bridge I/O windows (`None`: place none).
    pub io: Option<Range<u64>>,
    /// Bus numbers: the root bus is the first; bridges are numbered inside.
    pub buses: RangeInclusive<u8>,
}

/// A BAR the plan gives an address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlannedBar {
    /// The function.
    pub function: PciAddress,
    /// BAR index (the lower slot of a 64-bit BAR).
    pub slot: u8,
    /// Kind, as sized.
    pub kind: BarKind,
    /// Address given.
    pub address: u64,
    /// Size in bytes.
    pub size: u64,
}

/// What the plan does with one PCI-to-PCI bridge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedBridge {
    /// The bridge.
    pub bridge: PciAddress,
    /// Bus it sits on.
    pub primary: u8,
    /// Bus directly behind it.
    pub secondary: u8,
    /// Highest bus behind it.
    pub subordinate: u8,
    /// Bus numbers written by the plan (the firmware's were missing or impossible).
    pub numbered: bool,
    /// Windows laid out by the plan (false: the firmware's are kept).
    pub owned: bool,
    /// Memory window (exclusive end); `None`: closed (or the firmware's, when not owned).
    pub memory: Option<Range<u64>>,
    /// I/O window (exclusive end); `None`: closed (or the firmware's, when not owned).
    pub io: Option<Range<u64>>,
}

/// A function that must not be used, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The function.
    pub function: PciAddress,
    /// Why: [`Error::BarDoesNotFit`], [`Error::UnassignedBehindFirmwareWindow`],
    /// [`Error::BusNumbersExhausted`], or the BAR problem that made a BAR unusable.
    pub reason: Error,
}

/// An I/O BAR that got no address (the function is still usable through its memory BARs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeftOff {
    /// The function.
    pub function: PciAddress,
    /// BAR index.
    pub slot: u8,
    /// Why ([`Error::BarDoesNotFit`]).
    pub reason: Error,
}

/// The result of [`plan_resources`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ResourcePlan {
    /// BARs to program, in placement order.
    pub bars: Vec<PlannedBar>,
    /// Every bridge found, in walk order.
    pub bridges: Vec<PlannedBridge>,
    /// Functions refused, in the order they were refused.
    pub refused: Vec<Refusal>,
    /// I/O BARs left without an address.
    pub left_off: Vec<LeftOff>,
    /// Every function found (bridges included), in walk order.
    pub functions: Vec<PciAddress>,
}

impl ResourcePlan {
    /// Why `function` was refused, if it was.
    pub fn refusal(&self, function: PciAddress) -> Option<&Error> {
        self.refused
            .iter()
            .find(|refusal| refusal.function == function)
            .map(|refusal| &refusal.reason)
    }

    /// Copies each refusal into the matching function's `refused` field
    /// (call it on the list [`super::enumerate`] returns after [`apply_plan`]).
    pub fn mark_refused(&self, functions: &mut [PciFunction]) {
        for function in functions {
            if let Some(reason) = self.refusal(function.address) {
                function.refused = Some(reason.clone());
            }
        }
    }
}

/// Plans and applies: [`plan_resources`], then [`apply_plan`].
pub fn assign_resources<A: ConfigRegionAccess + ?Sized>(
    access: &A,
    segment: u16,
    windows: &ResourceWindows,
) -> Result<ResourcePlan> {
    let plan = plan_resources(access, segment, windows)?;
    apply_plan(access, &plan)?;
    Ok(plan)
}

/// One function found by the walk.
struct Node {
    function: PciFunction,
    /// Index (in `Walk::bridges`) of the bridge it sits behind; `None` on the root bus.
    parent: Option<usize>,
    refused: Option<Error>,
    /// I/O BAR slots left off (bit per slot).
    io_left_off: u8,
}

/// One bridge found by the walk.
struct BridgeNode {
    node: usize,
    plan: PlannedBridge,
    /// Whether the firmware opened its memory window (checked on the root-bus bridges only).
    firmware_window: Option<Range<u64>>,
    /// The firmware's I/O window, kept clear when the subtree is the firmware's.
    firmware_io_window: Option<Range<u64>>,
    /// The firmware's prefetchable window (root-bus bridges only): kept clear, and
    /// a bridge with one open is never owned.
    firmware_prefetch_window: Option<Range<u64>>,
}

struct Walk {
    nodes: Vec<Node>,
    bridges: Vec<BridgeNode>,
    /// Lowest bus number not yet scanned or claimed (256: none left). Buses
    /// are handed out in increasing order, so a subtree's buses are contiguous.
    next_free: u16,
}

impl Walk {
    fn refuse(&mut self, node: usize, reason: Error) {
        if self.nodes[node].refused.is_none() {
            self.nodes[node].refused = Some(reason);
        }
    }
}

/// Which address space a request lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Space {
    Memory,
    Io,
}

impl Space {
    fn granularity(self) -> u64 {
        match self {
            Space::Memory => MEMORY_WINDOW_GRANULARITY,
            Space::Io => IO_WINDOW_GRANULARITY,
        }
    }

    fn holds(self, kind: BarKind) -> bool {
        match self {
            Space::Memory => matches!(kind, BarKind::Memory32 | BarKind::Memory64),
            Space::Io => kind == BarKind::Io,
        }
    }
}

/// What a request places.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    Bar { node: usize, slot: u8 },
    Window { bridge: usize },
}

/// A laid-out bus: the window it needs and where each item goes inside it.
#[derive(Debug, Clone, Default)]
struct Layout {
    size: u64,
    align: u64,
    items: Vec<(Target, u64)>,
}

/// Walks the tree under `windows.buses.start()`, numbering bridges as
/// needed, and plans every BAR and bridge window. See the module docs.
pub fn plan_resources<A: ConfigRegionAccess + ?Sized>(
    access: &A,
    segment: u16,
    windows: &ResourceWindows,
) -> Result<ResourcePlan> {
    let mut walk = Walk {
        nodes: Vec::new(),
        bridges: Vec::new(),
        next_free: 0,
    };
    let root = *windows.buses.start();
    walk.next_free = u16::from(root) + 1;
    scan_bus(access, segment, root, None, *windows.buses.end(), &mut walk)?;

    // BARs that cannot be used at all refuse their function up front.
    for node in 0..walk.nodes.len() {
        let function = &walk.nodes[node].function;
        let unusable = function.bars.contains(&BarSlot::Invalid);
        if unusable {
            let reason = function
                .problems
                .iter()
                .find(|problem| {
                    matches!(
                        problem,
                        Error::BarTooLarge { .. }
                            | Error::BarAddress { .. }
                            | Error::BarReservedType { .. }
                            | Error::Bar64InLastSlot { .. }
                    )
                })
                .cloned()
                .unwrap_or(Error::BarIndex {
                    address: function.address,
                    slot: 0,
                    count: 6,
                });
            walk.refuse(node, reason);
        }
    }

    // Which subtrees are owned: a root-bus bridge with closed memory and
    // prefetchable windows, and everything below it. Below a firmware window
    // (either kind), unassigned memory BARs cannot be placed.
    for bridge in 0..walk.bridges.len() {
        let top = &walk.bridges[top_bridge(&walk, bridge)];
        walk.bridges[bridge].plan.owned = top.firmware_window.is_none() && top.firmware_prefetch_window.is_none();
    }
    for node in 0..walk.nodes.len() {
        let Some(parent) = walk.nodes[node].parent else {
            continue;
        };
        if walk.bridges[parent].plan.owned {
            continue;
        }
        let top = top_bridge(&walk, parent);
        let unassigned = walk.nodes[node]
            .function
            .bars
            .iter()
            .filter_map(BarSlot::bar)
            .find(|bar| bar.is_memory() && bar.address == 0)
            .map(|bar| bar.slot);
        if let Some(slot) = unassigned {
            let reason = Error::UnassignedBehindFirmwareWindow {
                address: walk.nodes[node].function.address,
                slot,
                bridge: walk.nodes[walk.bridges[top].node].function.address,
            };
            walk.refuse(node, reason);
        }
    }
    // Below-1M BARs cannot go in the PCI hole: refuse their functions when
    // the plan would have to place them.
    for node in 0..walk.nodes.len() {
        let owned = walk.nodes[node]
            .parent
            .is_some_and(|bridge| walk.bridges[bridge].plan.owned);
        let stuck = walk.nodes[node]
            .function
            .bars
            .iter()
            .filter_map(BarSlot::bar)
            .find(|bar| bar.kind == BarKind::MemoryBelow1M && (owned || bar.address == 0))
            .copied();
        if let Some(bar) = stuck {
            let reason = Error::BarDoesNotFit {
                address: walk.nodes[node].function.address,
                slot: bar.slot,
                size: bar.size,
                window_start: 0,
                window_end: 1 << 20,
            };
            walk.refuse(node, reason);
        }
    }

    let mut plan = ResourcePlan::default();
    place_space(&mut walk, windows, Space::Memory, &mut plan)?;
    // Without an I/O range every I/O BAR is left off (an empty window).
    let io_windows = ResourceWindows {
        memory: windows.io.clone().unwrap_or(0..0),
        io: None,
        buses: windows.buses.clone(),
    };
    place_space(&mut walk, &io_windows, Space::Io, &mut plan)?;
    // Everything behind a refused bridge is refused too: nothing routes to it.
    for node in 0..walk.nodes.len() {
        let mut above = walk.nodes[node].parent;
        while let Some(bridge) = above {
            let bridge_node = walk.bridges[bridge].node;
            if walk.nodes[bridge_node].refused.is_some() {
                let reason = Error::BehindRefusedBridge {
                    address: walk.nodes[node].function.address,
                    bridge: walk.nodes[bridge_node].function.address,
                };
                walk.refuse(node, reason);
                break;
            }
            above = walk.nodes[bridge_node].parent;
        }
    }
    // A refused function's BARs were dropped from the layouts; drop any
    // placement made for it before it was refused.
    plan.bars.retain(|bar| {
        !walk
            .nodes
            .iter()
            .any(|node| node.function.address == bar.function && node.refused.is_some())
    });
    plan.functions = walk.nodes.iter().map(|node| node.function.address).collect();
    plan.refused = walk
        .nodes
        .iter()
        .filter_map(|node| {
            node.refused.clone().map(|reason| Refusal {
                function: node.function.address,
                reason,
            })
        })
        .collect();
    plan.bridges = walk.bridges.iter().map(|bridge| bridge.plan.clone()).collect();
    Ok(plan)
}

/// The root-bus bridge above (or equal to) `bridge`.
fn top_bridge(walk: &Walk, mut bridge: usize) -> usize {
    while let Some(parent) = walk.nodes[walk.bridges[bridge].node].parent {
        bridge = parent;
    }
    bridge
}

/// Scans `bus` (depth first), numbering bridges whose numbers are missing;
/// bridges below may use buses up to `limit`.
fn scan_bus<A: ConfigRegionAccess + ?Sized>(
    access: &A,
    segment: u16,
    bus: u8,
    parent: Option<usize>,
    limit: u8,
    walk: &mut Walk,
) -> Result<()> {
    for device in 0..32u8 {
        let Some(first) = read_function(access, PciAddress::new(segment, bus, device, 0))? else {
            continue;
        };
        let count = if first.multifunction { 8 } else { 1 };
        let mut found = Some(first);
        for number in 0..count {
            let function = match found.take() {
                Some(function) => Some(function),
                None => read_function(access, PciAddress::new(segment, bus, device, number))?,
            };
            let Some(function) = function else { continue };
            let node = walk.nodes.len();
            let header = function.header;
            walk.nodes.push(Node {
                function,
                parent,
                refused: None,
                io_left_off: 0,
            });
            if let HeaderKind::Bridge {
                secondary, subordinate, ..
            } = header
            {
                scan_bridge(
                    access,
                    segment,
                    bus,
                    node,
                    parent,
                    (secondary, subordinate),
                    limit,
                    walk,
                )?;
            }
        }
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn scan_bridge<A: ConfigRegionAccess + ?Sized>(
    access: &A,
    segment: u16,
    bus: u8,
    node: usize,
    parent: Option<usize>,
    (secondary, subordinate): (u8, u8),
    limit: u8,
    walk: &mut Walk,
) -> Result<()> {
    let address = walk.nodes[node].function.address;
    let cfg = ConfigSpace::new(access, address);
    // The firmware's numbers are kept when they describe a fresh range
    // below this bus, inside the parent's range.
    let firmware_ok =
        secondary > bus && u16::from(secondary) >= walk.next_free && secondary <= subordinate && subordinate <= limit;
    let bridge = walk.bridges.len();
    let (firmware_window, firmware_io_window, firmware_prefetch_window) = if parent.is_none() {
        (
            open_memory_window(cfg.read32(BRIDGE_MEMORY)?),
            open_io_window(cfg.read32(BRIDGE_IO)?),
            open_prefetch_window(
                cfg.read32(BRIDGE_PREFETCH)?,
                cfg.read32(BRIDGE_PREFETCH_BASE_UPPER)?,
                cfg.read32(BRIDGE_PREFETCH_LIMIT_UPPER)?,
            ),
        )
    } else {
        (None, None, None)
    };
    walk.bridges.push(BridgeNode {
        node,
        plan: PlannedBridge {
            bridge: address,
            primary: bus,
            secondary,
            subordinate,
            numbered: !firmware_ok,
            owned: false,
            memory: None,
            io: None,
        },
        firmware_window,
        firmware_io_window,
        firmware_prefetch_window,
    });
    if firmware_ok {
        walk.next_free = u16::from(secondary) + 1;
        scan_bus(access, segment, secondary, Some(bridge), subordinate, walk)?;
        // The whole range stays claimed, used or not.
        walk.next_free = walk.next_free.max(u16::from(subordinate) + 1);
        return Ok(());
    }
    // Number it: the next free bus; the subordinate is the top of the
    // parent's range while the subtree is scanned, then the last bus used.
    let Some(new_secondary) = u8::try_from(walk.next_free).ok().filter(|&b| b > bus && b <= limit) else {
        walk.refuse(node, Error::BusNumbersExhausted { bridge: address });
        return Ok(());
    };
    let latency = cfg.read32(BRIDGE_BUSES)? & 0xFF00_0000;
    let buses = |secondary: u8, subordinate: u8| {
        latency | u32::from(bus) | u32::from(secondary) << 8 | u32::from(subordinate) << 16
    };
    cfg.write32(BRIDGE_BUSES, buses(new_secondary, limit))?;
    walk.next_free = u16::from(new_secondary) + 1;
    scan_bus(access, segment, new_secondary, Some(bridge), limit, walk)?;
    // `next_free - 1 <= limit <= 255`: buses are only handed out up to `limit`.
    let highest = u8::try_from(walk.next_free - 1).unwrap_or(limit);
    cfg.write32(BRIDGE_BUSES, buses(new_secondary, highest))?;
    let plan = &mut walk.bridges[bridge].plan;
    plan.secondary = new_secondary;
    plan.subordinate = highest;
    Ok(())
}

/// `base..=limit` as a range; a limit at the last address (a 64-bit
/// prefetchable limit of all ones) ends one byte short, as the range's end
/// cannot be 2^64.
fn base_limit_range(base: u64, limit: u64) -> Option<Range<u64>> {
    (base != 0 && base <= limit).then(|| base..limit.saturating_add(1))
}

/// The memory window a bridge's base/limit register opens, if any. A zero
/// base is taken as "not programmed" (registers reset to zero, and nothing
/// is ever placed at physical 0).
fn open_memory_window(register: u32) -> Option<Range<u64>> {
    let base = u64::from(register & 0xFFF0) << 16;
    let limit = (u64::from(register >> 16 & 0xFFF0) << 16) | 0xF_FFFF;
    base_limit_range(base, limit)
}

/// The prefetchable window a bridge's base/limit register (and, for a 64-bit
/// window, the two upper-half registers) opens, if any; a zero base is "not
/// programmed", as for memory.
fn open_prefetch_window(register: u32, base_upper: u32, limit_upper: u32) -> Option<Range<u64>> {
    let is_64bit = register & 0xF == 1;
    let (base_upper, limit_upper) = if is_64bit { (base_upper, limit_upper) } else { (0, 0) };
    let base = u64::from(base_upper) << 32 | u64::from(register & 0xFFF0) << 16;
    let limit = u64::from(limit_upper) << 32 | (u64::from(register >> 16 & 0xFFF0) << 16) | 0xF_FFFF;
    base_limit_range(base, limit)
}

/// The (16-bit) I/O window a bridge's base/limit bytes open, if any; a
/// zero base is taken as "not programmed", as for memory.
fn open_io_window(register: u32) -> Option<Range<u64>> {
    let base = u64::from(register & 0xF0) << 8;
    let limit = (u64::from(register >> 8 & 0xF0) << 8) | 0xFFF;
    base_limit_range(base, limit)
}

/// BARs of `node` in `space` that the plan must place: all of them in an
/// owned subtree, the unassigned ones on the root bus, none below a firmware
/// window or on a refused function.
fn needs_placing(walk: &Walk, node: usize, space: Space) -> impl Iterator<Item = super::Bar> + '_ {
    let entry = &walk.nodes[node];
    let owned = entry.parent.map(|bridge| walk.bridges[bridge].plan.owned);
    let usable = entry.refused.is_none();
    entry
        .function
        .bars
        .iter()
        .filter_map(BarSlot::bar)
        .filter(move |bar| {
            usable
                && space.holds(bar.kind)
                && entry.io_left_off & (1 << bar.slot) == 0
                && match owned {
                    None => bar.address == 0,
                    Some(owned) => owned,
                }
        })
        .copied()
}

/// Lays out the items behind owned bridge `bridge` in `space`
/// (recursively); `None` when a size overflows.
fn layout_bridge(walk: &Walk, bridge: usize, space: Space, layouts: &mut [Option<Layout>]) -> Option<Layout> {
    let mut requests: Vec<(u64, u64, Target)> = Vec::new();
    for node in 0..walk.nodes.len() {
        if walk.nodes[node].parent != Some(bridge) {
            continue;
        }
        for bar in needs_placing(walk, node, space) {
            requests.push((bar.size, bar.size, Target::Bar { node, slot: bar.slot }));
        }
        if walk.nodes[node].refused.is_some() {
            continue;
        }
        if let Some(child) = walk.bridges.iter().position(|b| b.node == node) {
            let layout = layout_bridge(walk, child, space, layouts)?;
            if layout.size > 0 {
                requests.push((layout.size, layout.align, Target::Window { bridge: child }));
            }
            layouts[child] = Some(layout);
        }
    }
    pack(requests, space.granularity())
}

/// Packs requests largest alignment first; the total rounds up to `granularity`.
fn pack(mut requests: Vec<(u64, u64, Target)>, granularity: u64) -> Option<Layout> {
    requests.sort_by(|a, b| b.1.cmp(&a.1).then(b.0.cmp(&a.0)));
    let mut offset = 0u64;
    let mut items = Vec::with_capacity(requests.len());
    for &(size, align, target) in &requests {
        let at = offset.checked_next_multiple_of(align)?;
        items.push((target, at));
        offset = at.checked_add(size)?;
    }
    let size = offset.checked_next_multiple_of(granularity)?;
    let align = requests.first().map_or(granularity, |r| r.1.max(granularity));
    Some(Layout { size, align, items })
}

/// The function with the largest BAR (in `space`) placed through `target`.
fn largest_bar_under(walk: &Walk, target: Target, space: Space) -> Option<(usize, super::Bar)> {
    match target {
        Target::Bar { node, slot } => walk.nodes[node].function.bar(slot).map(|bar| (node, *bar)),
        Target::Window { bridge } => {
            let mut best: Option<(usize, super::Bar)> = None;
            for node in 0..walk.nodes.len() {
                let mut above = walk.nodes[node].parent;
                let mut below = false;
                while let Some(b) = above {
                    if b == bridge {
                        below = true;
                        break;
                    }
                    above = walk.nodes[walk.bridges[b].node].parent;
                }
                if !below {
                    continue;
                }
                for bar in needs_placing(walk, node, space) {
                    if best.is_none_or(|(_, current)| bar.size > current.size) {
                        best = Some((node, bar));
                    }
                }
            }
            best
        }
    }
}

/// Places everything in `space`, refusing (memory) or leaving off (I/O)
/// the largest BAR of a request that does not fit, until everything fits.
fn place_space(walk: &mut Walk, windows: &ResourceWindows, space: Space, plan: &mut ResourcePlan) -> Result<()> {
    let hole = windows.memory.clone();
    loop {
        // Busy: what the firmware placed and the plan keeps.
        let mut busy: Vec<Range<u64>> = Vec::new();
        for node in 0..walk.nodes.len() {
            if walk.nodes[node].parent.is_none() {
                for bar in walk.nodes[node].function.bars.iter().filter_map(BarSlot::bar) {
                    if space.holds(bar.kind) && bar.address != 0 {
                        busy.push(bar.address..bar.address.saturating_add(bar.size));
                    }
                }
            }
        }
        for bridge in walk.bridges.iter().filter(|bridge| !bridge.plan.owned) {
            let windows = match space {
                Space::Memory => [&bridge.firmware_window, &bridge.firmware_prefetch_window],
                Space::Io => [&bridge.firmware_io_window, &None],
            };
            busy.extend(windows.into_iter().flatten().cloned());
        }
        let mut layouts: Vec<Option<Layout>> = alloc::vec![None; walk.bridges.len()];
        let mut requests: Vec<(u64, u64, Target)> = Vec::new();
        let mut overflow = None;
        for node in 0..walk.nodes.len() {
            if walk.nodes[node].parent.is_some() {
                continue;
            }
            for bar in needs_placing(walk, node, space) {
                requests.push((bar.size, bar.size, Target::Bar { node, slot: bar.slot }));
            }
            if walk.nodes[node].refused.is_some() {
                continue;
            }
            if let Some(bridge) = walk.bridges.iter().position(|b| b.node == node)
                && walk.bridges[bridge].plan.owned
            {
                match layout_bridge(walk, bridge, space, &mut layouts) {
                    Some(layout) => {
                        if layout.size > 0 {
                            requests.push((layout.size, layout.align, Target::Window { bridge }));
                        }
                        layouts[bridge] = Some(layout);
                    }
                    None => overflow = Some(Target::Window { bridge }),
                }
            }
        }
        requests.sort_by(|a, b| b.1.cmp(&a.1).then(b.0.cmp(&a.0)));
        let mut placed: Vec<(Target, u64)> = Vec::new();
        let mut failed = overflow;
        if failed.is_none() {
            for &(size, align, target) in &requests {
                match first_fit(&hole, &busy, size, align) {
                    Some(at) => {
                        busy.push(at..at + size);
                        placed.push((target, at));
                    }
                    None => {
                        failed = Some(target);
                        break;
                    }
                }
            }
        }
        let Some(failed) = failed else {
            record(walk, space, &layouts, &placed, plan);
            return Ok(());
        };
        let Some((node, bar)) = largest_bar_under(walk, failed, space) else {
            // Cannot happen: a failing request holds at least one BAR. Stop
            // rather than loop.
            record(walk, space, &layouts, &placed, plan);
            return Ok(());
        };
        let reason = Error::BarDoesNotFit {
            address: walk.nodes[node].function.address,
            slot: bar.slot,
            size: bar.size,
            window_start: hole.start,
            window_end: hole.end,
        };
        match space {
            Space::Memory => walk.refuse(node, reason),
            Space::Io => {
                walk.nodes[node].io_left_off |= 1 << bar.slot;
                plan.left_off.push(LeftOff {
                    function: walk.nodes[node].function.address,
                    slot: bar.slot,
                    reason,
                });
            }
        }
    }
}

/// Lowest `align`-aligned address in `hole` where `size` bytes overlap nothing in `busy`.
fn first_fit(hole: &Range<u64>, busy: &[Range<u64>], size: u64, align: u64) -> Option<u64> {
    let mut at = hole.start.checked_next_multiple_of(align)?;
    loop {
        let end = at.checked_add(size)?;
        if end > hole.end {
            return None;
        }
        match busy.iter().filter(|b| b.start < end && at < b.end).map(|b| b.end).max() {
            None => return Some(at),
            Some(past) => at = past.checked_next_multiple_of(align)?,
        }
    }
}

/// Turns placements (root level) and layouts (inside owned windows) into
/// the plan's BARs and bridge windows.
fn record(
    walk: &mut Walk,
    space: Space,
    layouts: &[Option<Layout>],
    placed: &[(Target, u64)],
    plan: &mut ResourcePlan,
) {
    let mut stack: Vec<(Target, u64)> = placed.to_vec();
    while let Some((target, at)) = stack.pop() {
        match target {
            Target::Bar { node, slot } => {
                let Some(bar) = walk.nodes[node].function.bar(slot) else {
                    continue;
                };
                plan.bars.push(PlannedBar {
                    function: walk.nodes[node].function.address,
                    slot,
                    kind: bar.kind,
                    address: at,
                    size: bar.size,
                });
            }
            Target::Window { bridge } => {
                let Some(layout) = &layouts[bridge] else { continue };
                let window = Some(at..at + layout.size);
                match space {
                    Space::Memory => walk.bridges[bridge].plan.memory = window,
                    Space::Io => walk.bridges[bridge].plan.io = window,
                }
                stack.extend(layout.items.iter().map(|&(target, offset)| (target, at + offset)));
            }
        }
    }
}

/// Programs the plan: BARs (decoding off while written), bridge windows
/// (owned bridges; closed windows where nothing is behind), decoding and
/// bus mastering on bridges with a window; refused functions get decoding
/// and bus mastering turned off.
pub fn apply_plan<A: ConfigRegionAccess + ?Sized>(access: &A, plan: &ResourcePlan) -> Result<()> {
    let decode = CommandRegister::MEMORY_ENABLE | CommandRegister::IO_ENABLE;
    for refusal in &plan.refused {
        let cfg = ConfigSpace::new(access, refusal.function);
        let command = cfg.command()?;
        cfg.set_command(command - decode - CommandRegister::BUS_MASTER_ENABLE)?;
    }
    for bar in &plan.bars {
        let cfg = ConfigSpace::new(access, bar.function);
        let command = cfg.command()?;
        cfg.set_command(command - decode)?;
        let offset = 0x10 + 4 * u16::from(bar.slot);
        let flags = cfg.read32(offset)? & if bar.kind == BarKind::Io { 0x3 } else { 0xF };
        cfg.write32(offset, (bar.address as u32 & !0xF) | flags)?;
        if bar.kind == BarKind::Memory64 {
            cfg.write32(offset + 4, (bar.address >> 32) as u32)?;
        }
        cfg.set_command(command)?;
    }
    for bridge in plan.bridges.iter().filter(|bridge| bridge.owned) {
        if plan.refusal(bridge.bridge).is_some() {
            continue;
        }
        let cfg = ConfigSpace::new(access, bridge.bridge);
        let command = cfg.command()?;
        cfg.set_command(command - decode)?;
        // Memory: bits 31:20 of base and limit in bits 15:4 of each half; closed = base above limit.
        let memory = match &bridge.memory {
            Some(window) => ((window.start >> 16) as u32 & 0xFFF0) | ((((window.end - 1) >> 16) as u32 & 0xFFF0) << 16),
            None => 0x0000_FFF0,
        };
        cfg.write32(BRIDGE_MEMORY, memory)?;
        // The prefetchable window stays closed: everything goes in the memory window.
        cfg.write32(BRIDGE_PREFETCH, 0x0000_FFF0)?;
        cfg.write32(BRIDGE_PREFETCH_BASE_UPPER, 0)?;
        cfg.write32(BRIDGE_PREFETCH_LIMIT_UPPER, 0)?;
        // I/O: bits 15:12 in bits 7:4 of each byte; the secondary status half
        // is written as zero (its bits are write-one-to-clear).
        let io = match &bridge.io {
            Some(window) => ((window.start >> 8) as u32 & 0xF0) | ((((window.end - 1) >> 8) as u32 & 0xF0) << 8),
            None => 0x0000_00F0,
        };
        cfg.write32(BRIDGE_IO, io)?;
        cfg.write32(BRIDGE_IO_UPPER, 0)?;
        let mut enabled = command - decode;
        enabled.set(CommandRegister::MEMORY_ENABLE, bridge.memory.is_some());
        enabled.set(CommandRegister::IO_ENABLE, bridge.io.is_some());
        enabled.set(
            CommandRegister::BUS_MASTER_ENABLE,
            bridge.memory.is_some() || bridge.io.is_some(),
        );
        cfg.set_command(enabled)?;
    }
    Ok(())
}
