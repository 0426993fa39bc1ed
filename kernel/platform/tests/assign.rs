//! Resource assignment behind bridges (`platform::pci::assign_resources`) on
//! a fake configuration space that routes configuration cycles the way
//! bridges do: a bus other than the root is reachable only through a bridge
//! whose secondary..=subordinate range covers it.

mod common;

use common::*;
use platform::Error;
use platform::pci::*;

/// The q35-like 32-bit PCI hole and I/O range the kernel hands the planner.
const HOLE: std::ops::Range<u64> = 0xC000_0000..0xFEC0_0000;
const IO: std::ops::Range<u64> = 0xC000..0x1_0000;

fn windows() -> ResourceWindows {
    ResourceWindows {
        memory: HOLE,
        io: Some(IO),
        buses: 0..=255,
    }
}

fn addr(bus: u8, device: u8, function: u8) -> PciAddress {
    PciAddress::new(0, bus, device, function)
}

/// Routes configuration cycles by the bridges' bus-number registers.
struct Routed<'a>(&'a FakeConfig);

impl Routed<'_> {
    fn visible(&self, bus: u8) -> bool {
        if bus == 0 {
            return true;
        }
        let bridges: Vec<(u8, u8, u8)> = self
            .0
            .functions
            .borrow()
            .iter()
            .filter(|(_, f)| (f.regs[3] >> 16) & 0x7F == 1)
            .map(|(a, f)| (a.bus(), (f.regs[6] >> 8) as u8, (f.regs[6] >> 16) as u8))
            .collect();
        bridges.into_iter().any(|(on, secondary, subordinate)| {
            on < bus && secondary != 0 && (secondary..=subordinate).contains(&bus) && self.visible(on)
        })
    }
}

impl ConfigRegionAccess for Routed<'_> {
    unsafe fn read(&self, address: PciAddress, offset: u16) -> u32 {
        if !self.visible(address.bus()) {
            return u32::MAX;
        }
        // SAFETY: forwarded to the fake, which accepts any address.
        unsafe { self.0.read(address, offset) }
    }

    unsafe fn write(&self, address: PciAddress, offset: u16, value: u32) {
        if self.visible(address.bus()) {
            // SAFETY: as above.
            unsafe { self.0.write(address, offset, value) }
        }
    }
}

/// A PCIe root port / switch port as qboot leaves it: bus numbers zero,
/// windows zero (registers writable), decoding off.
fn port(secondary: u8, subordinate: u8) -> FakeFunction {
    let mut bridge = FakeFunction::bridge(0x1B36, 0x000C, 0, secondary, subordinate);
    bridge.writable[6] = 0x00FF_FFFF;
    bridge.writable[7] = 0x0000_F0F0;
    bridge.writable[8] = 0xFFF0_FFF0;
    bridge.writable[9] = 0xFFF0_FFF0;
    bridge.writable[10] = u32::MAX;
    bridge.writable[11] = u32::MAX;
    bridge.writable[12] = 0xFFFF_FFFF;
    bridge
}

/// A MegaRAID-like endpoint with no BAR assigned: I/O 256, 64-bit 16 KiB, 32-bit 1 MiB.
fn megaraid() -> FakeFunction {
    FakeFunction::endpoint(0x1000, 0x0078, 0x01, 0x04)
        .bar_io(0, 0, 0x100, false)
        .bar_mem64(1, 0, 0x4000, false)
        .bar_mem32(3, 0, 0x10_0000, false)
}

fn memory_window(config: &FakeConfig, bridge: PciAddress) -> Option<std::ops::Range<u64>> {
    let register = config.reg(bridge, 0x20);
    let base = u64::from(register & 0xFFF0) << 16;
    let limit = (u64::from(register >> 16 & 0xFFF0) << 16) | 0xF_FFFF;
    (base <= limit).then(|| base..limit + 1)
}

fn io_window(config: &FakeConfig, bridge: PciAddress) -> Option<std::ops::Range<u64>> {
    let register = config.reg(bridge, 0x1C);
    let base = u64::from(register & 0xF0) << 8;
    let limit = (u64::from(register >> 8 & 0xF0) << 8) | 0xFFF;
    (base <= limit).then(|| base..limit + 1)
}

fn command(config: &FakeConfig, function: PciAddress) -> CommandRegister {
    CommandRegister::from_bits_retain(config.reg(function, 0x04) as u16)
}

fn contains(outer: &std::ops::Range<u64>, inner: &std::ops::Range<u64>) -> bool {
    outer.start <= inner.start && inner.end <= outer.end
}

/// Every memory BAR of `function` (after enumeration) as a range.
fn memory_bars(function: &PciFunction) -> Vec<std::ops::Range<u64>> {
    function
        .bars
        .iter()
        .filter_map(BarSlot::bar)
        .filter(|bar| bar.is_memory())
        .map(|bar| bar.address..bar.address + bar.size)
        .collect()
}

fn no_overlaps(mut ranges: Vec<std::ops::Range<u64>>) -> bool {
    ranges.sort_by_key(|range| range.start);
    ranges.windows(2).all(|pair| pair[0].end <= pair[1].start)
}

#[test]
fn root_port_with_a_megaraid_behind_it_gets_bus_numbers_windows_and_bars() {
    let config = FakeConfig::new();
    config.add(0, 0, 0, FakeFunction::endpoint(0x8086, 0x29C0, 0x06, 0x00));
    config.add(0, 1, 0, port(0, 0));
    config.add(1, 0, 0, megaraid());
    // A bus-0 device with an unassigned BAR too.
    config.add(
        0,
        2,
        0,
        FakeFunction::endpoint(0x1234, 0x11E8, 0x00, 0xFF).bar_mem32(0, 0, 0x10_0000, false),
    );
    let routed = Routed(&config);

    let plan = assign_resources(&routed, 0, &windows()).unwrap();
    assert_eq!(plan.refused, []);
    assert_eq!(plan.left_off, []);
    assert_eq!(plan.bridges.len(), 1);
    let bridge = &plan.bridges[0];
    assert_eq!((bridge.primary, bridge.secondary, bridge.subordinate), (0, 1, 1));
    assert!(bridge.numbered && bridge.owned);
    assert_eq!(config.reg(addr(0, 1, 0), 0x18) & 0xFF_FFFF, 0x01_01_00);

    // The window is 1 MiB aligned, inside the hole, and what the registers say.
    let window = bridge.memory.clone().unwrap();
    assert_eq!(window.start % (1 << 20), 0);
    assert_eq!(window.end % (1 << 20), 0);
    assert!(contains(&HOLE, &window));
    assert_eq!(memory_window(&config, addr(0, 1, 0)), Some(window.clone()));
    let io = bridge.io.clone().unwrap();
    assert_eq!(io.start % 4096, 0);
    assert!(contains(&IO, &io));
    assert_eq!(io_window(&config, addr(0, 1, 0)), Some(io.clone()));
    let bridge_command = command(&config, addr(0, 1, 0));
    assert!(
        bridge_command
            .contains(CommandRegister::MEMORY_ENABLE | CommandRegister::IO_ENABLE | CommandRegister::BUS_MASTER_ENABLE)
    );
    // The prefetchable window is closed (base above limit).
    let prefetch = config.reg(addr(0, 1, 0), 0x24);
    assert!(prefetch & 0xFFF0 > (prefetch >> 16) & 0xFFF0);

    // Enumeration now sees the MegaRAID with its BARs inside the window.
    let functions = enumerate(&routed, 0, 0..=255, ScanMode::FollowBridges).unwrap();
    let megaraid = functions.iter().find(|f| f.address == addr(1, 0, 0)).unwrap();
    let bars = memory_bars(megaraid);
    assert_eq!(bars.len(), 2);
    for bar in &bars {
        assert!(contains(&window, bar), "{bar:x?} outside {window:x?}");
        assert_eq!(bar.start % (bar.end - bar.start), 0, "naturally aligned");
    }
    let io_bar = megaraid.bar(0).unwrap();
    assert!(contains(&io, &(io_bar.address..io_bar.address + io_bar.size)));
    // The bus-0 device is placed outside the bridge window, in the hole.
    let edu = functions.iter().find(|f| f.address == addr(0, 2, 0)).unwrap();
    let edu_bar = memory_bars(edu)[0].clone();
    assert!(contains(&HOLE, &edu_bar));
    assert!(no_overlaps(vec![edu_bar, window]));
    assert_eq!(config.probes_with_decode_on.get(), 0);
}

#[test]
fn nested_bridges_get_nested_windows() {
    let config = FakeConfig::new();
    // Root port 0:1.0 -> switch upstream 1:0.0 -> downstream 2:0.0 and 2:1.0.
    config.add(0, 1, 0, port(0, 0));
    config.add(1, 0, 0, port(0, 0));
    config.add(2, 0, 0, port(0, 0).multifunction());
    config.add(2, 0, 1, port(0, 0));
    config.add(
        3,
        0,
        0,
        FakeFunction::endpoint(0x1AF4, 0x1042, 0x01, 0x00).bar_mem64(0, 0, 2 << 20, false),
    );
    config.add(4, 0, 0, megaraid());
    // A second root port with nothing behind it.
    config.add(0, 2, 0, port(0, 0));
    let routed = Routed(&config);

    let plan = assign_resources(&routed, 0, &windows()).unwrap();
    assert_eq!(plan.refused, []);
    let numbers: Vec<(PciAddress, u8, u8, u8)> = plan
        .bridges
        .iter()
        .map(|b| (b.bridge, b.primary, b.secondary, b.subordinate))
        .collect();
    assert_eq!(
        numbers,
        [
            (addr(0, 1, 0), 0, 1, 4),
            (addr(1, 0, 0), 1, 2, 4),
            (addr(2, 0, 0), 2, 3, 3),
            (addr(2, 0, 1), 2, 4, 4),
            (addr(0, 2, 0), 0, 5, 5),
        ]
    );
    let window = |bus: u8, device: u8, function: u8| {
        plan.bridges
            .iter()
            .find(|b| b.bridge == addr(bus, device, function))
            .unwrap()
            .memory
            .clone()
    };
    let root = window(0, 1, 0).unwrap();
    let upstream = window(1, 0, 0).unwrap();
    let down_a = window(2, 0, 0).unwrap();
    let down_b = window(2, 0, 1).unwrap();
    assert!(contains(&root, &upstream));
    assert!(contains(&upstream, &down_a) && contains(&upstream, &down_b));
    assert!(no_overlaps(vec![down_a.clone(), down_b.clone()]));
    for w in [&root, &upstream, &down_a, &down_b] {
        assert_eq!(w.start % (1 << 20), 0);
        assert_eq!(w.end % (1 << 20), 0);
    }
    assert_eq!(window(0, 2, 0), None, "nothing behind: window closed");
    assert!(!command(&config, addr(0, 2, 0)).contains(CommandRegister::MEMORY_ENABLE));
    let functions = enumerate(&routed, 0, 0..=255, ScanMode::FollowBridges).unwrap();
    let virtio = functions.iter().find(|f| f.address == addr(3, 0, 0)).unwrap();
    assert!(contains(&down_a, &memory_bars(virtio)[0]));
    let megaraid = functions.iter().find(|f| f.address == addr(4, 0, 0)).unwrap();
    for bar in memory_bars(megaraid) {
        assert!(contains(&down_b, &bar));
    }
    assert_eq!(functions.len(), 7, "every function reachable");
}

#[test]
fn a_bar_that_cannot_fit_refuses_its_function_which_is_never_matched() {
    let config = FakeConfig::new();
    config.add(0, 1, 0, port(0, 0));
    // 8 GiB: larger than the whole 32-bit hole.
    config.add(
        1,
        0,
        0,
        FakeFunction::endpoint(0x1AF4, 0x1042, 0x01, 0x00).bar_mem64(0, 0, 8 << 30, false),
    );
    config.add(1, 1, 0, megaraid());
    let routed = Routed(&config);

    let plan = assign_resources(&routed, 0, &windows()).unwrap();
    assert_eq!(
        plan.refused,
        [Refusal {
            function: addr(1, 0, 0),
            reason: Error::BarDoesNotFit {
                address: addr(1, 0, 0),
                slot: 0,
                size: 8 << 30,
                window_start: HOLE.start,
                window_end: HOLE.end,
            }
        }]
    );
    assert!(plan.refused[0].reason.to_string().contains("does not fit"));
    // Its neighbour still works.
    let window = plan.bridges[0].memory.clone().unwrap();
    assert!(window.end - window.start < 8 << 30);
    let mut functions = enumerate(&routed, 0, 0..=255, ScanMode::FollowBridges).unwrap();
    plan.mark_refused(&mut functions);
    static STORAGE: [DeviceMatch; 2] = [DeviceMatch::class(0x01, 0x00), DeviceMatch::class(0x01, 0x04)];
    let drivers = [PciDriver {
        name: "any",
        matches: &STORAGE,
    }];
    let refused = functions.iter().find(|f| f.address == addr(1, 0, 0)).unwrap();
    assert!(refused.refused.is_some());
    assert!(
        match_driver(&drivers, refused).is_none(),
        "a refused function is never probed"
    );
    assert!(PciListing(&functions).to_string().contains("refused: "));
    let cmd = command(&config, addr(1, 0, 0));
    assert!(!cmd.intersects(CommandRegister::MEMORY_ENABLE | CommandRegister::BUS_MASTER_ENABLE));
    let megaraid = functions.iter().find(|f| f.address == addr(1, 1, 0)).unwrap();
    assert!(match_driver(&drivers, megaraid).is_some());
    for bar in memory_bars(megaraid) {
        assert!(contains(&window, &bar));
    }
}

/// Through placement: a 64-bit BAR that sizes to 2^63
/// refuses its function; the BARs placed after it are in the hole, not at 0.
#[test]
fn bar_sizing_to_2_pow_63_is_refused_and_later_bars_do_not_wrap() {
    let config = FakeConfig::new();
    config.add(
        0,
        3,
        0,
        FakeFunction::endpoint(0x1AF4, 0x1042, 0x01, 0x00).bar_mem64(0, 0, 1 << 63, false),
    );
    config.add(0, 4, 0, megaraid());
    let plan = assign_resources(&config, 0, &windows()).unwrap();
    assert_eq!(plan.refused.len(), 1);
    assert_eq!(plan.refused[0].function, addr(0, 3, 0));
    assert!(matches!(plan.refused[0].reason, Error::BarTooLarge { size, .. } if size == 1 << 63));
    assert!(plan.bars.iter().all(|bar| bar.function == addr(0, 4, 0)));
    for bar in plan.bars.iter().filter(|bar| bar.kind != BarKind::Io) {
        assert!(contains(&HOLE, &(bar.address..bar.address + bar.size)), "{bar:x?}");
    }
}

#[test]
fn firmware_assigned_trees_are_kept_and_unassigned_bars_behind_them_refused() {
    let config = FakeConfig::new();
    // SeaBIOS-like: bus numbers 1/1, window 0xFE00_0000..0xFE1F_FFFF, MEM on.
    let mut bridge = port(1, 1).command(0x0007);
    bridge.regs[8] = 0xFE10_FE00;
    bridge.regs[7] = 0xC0C0; // I/O window 0xC000..=0xCFFF
    config.add(0, 1, 0, bridge);
    config.add(
        1,
        0,
        0,
        FakeFunction::endpoint(0x1AF4, 0x1042, 0x01, 0x00).bar_mem32(0, 0xFE00_0000, 0x4000, false),
    );
    config.add(
        1,
        1,
        0,
        FakeFunction::endpoint(0x1000, 0x0078, 0x01, 0x04).bar_mem32(0, 0, 0x4000, false),
    );
    // A bus-0 device with a firmware address next to one without.
    config.add(
        0,
        2,
        0,
        FakeFunction::endpoint(0x1234, 0x1111, 0x03, 0x00).bar_mem32(0, 0xC000_0000, 0x100_0000, true),
    );
    config.add(
        0,
        3,
        0,
        FakeFunction::endpoint(0x1234, 0x11E8, 0x00, 0xFF)
            .bar_mem32(0, 0, 0x10_0000, false)
            .bar_io(1, 0, 0x100, false),
    );
    let routed = Routed(&config);
    let before = config.reg(addr(0, 1, 0), 0x20);

    let plan = assign_resources(&routed, 0, &windows()).unwrap();
    assert!(!plan.bridges[0].owned && !plan.bridges[0].numbered);
    assert_eq!(config.reg(addr(0, 1, 0), 0x20), before, "firmware window untouched");
    assert_eq!(
        plan.refused,
        [Refusal {
            function: addr(1, 1, 0),
            reason: Error::UnassignedBehindFirmwareWindow {
                address: addr(1, 1, 0),
                slot: 0,
                bridge: addr(0, 1, 0),
            }
        }]
    );
    // Only the bus-0 device without an address is placed, clear of the
    // firmware's BAR and windows (memory and I/O).
    assert_eq!(plan.bars.len(), 2, "{plan:#x?}");
    let io = plan.bars.iter().find(|bar| bar.kind == BarKind::Io).unwrap();
    assert!(contains(&IO, &(io.address..io.address + io.size)));
    assert!(
        io.address >= 0xD000,
        "I/O BAR at {:#x} inside the firmware's I/O window",
        io.address
    );
    let placed = plan.bars.iter().find(|bar| bar.kind != BarKind::Io).unwrap();
    assert_eq!(placed.function, addr(0, 3, 0));
    let placed = placed.address..placed.address + placed.size;
    assert!(contains(&HOLE, &placed));
    assert!(no_overlaps(vec![
        placed,
        0xC000_0000..0xC100_0000,
        0xFE00_0000..0xFE20_0000
    ]));
    assert_eq!(config.reg(addr(1, 0, 0), 0x10), 0xFE00_0000, "firmware BAR kept");
}

#[test]
fn running_out_of_bus_numbers_refuses_the_bridge_and_what_is_behind() {
    let config = FakeConfig::new();
    config.add(0, 1, 0, port(0, 0));
    config.add(0, 2, 0, port(0, 0));
    config.add(1, 0, 0, megaraid());
    let routed = Routed(&config);
    let plan = assign_resources(
        &routed,
        0,
        &ResourceWindows {
            memory: HOLE,
            io: None,
            buses: 0..=1,
        },
    )
    .unwrap();
    assert_eq!(
        plan.refused,
        [Refusal {
            function: addr(0, 2, 0),
            reason: Error::BusNumbersExhausted { bridge: addr(0, 2, 0) }
        }]
    );
    // Without an I/O range the I/O BAR is left off, the function kept.
    assert_eq!(plan.left_off.len(), 1);
    assert_eq!((plan.left_off[0].function, plan.left_off[0].slot), (addr(1, 0, 0), 0));
    assert_eq!(plan.bridges[0].io, None);
}

#[test]
fn everything_behind_a_refused_bridge_is_refused() {
    let config = FakeConfig::new();
    // The bridge's own BAR sizes to 2^63: the bridge is refused, so its subtree too.
    let mut bridge = port(0, 0);
    bridge.regs[4] = 0b100;
    bridge.writable[4] = 0;
    bridge.regs[5] = 0;
    bridge.writable[5] = 0x8000_0000;
    config.add(0, 1, 0, bridge);
    config.add(1, 0, 0, megaraid());
    let routed = Routed(&config);
    let plan = assign_resources(&routed, 0, &windows()).unwrap();
    let refused: Vec<PciAddress> = plan.refused.iter().map(|r| r.function).collect();
    assert_eq!(refused, [addr(0, 1, 0), addr(1, 0, 0)]);
    assert_eq!(
        plan.refusal(addr(1, 0, 0)),
        Some(&Error::BehindRefusedBridge {
            address: addr(1, 0, 0),
            bridge: addr(0, 1, 0)
        })
    );
    assert!(plan.bars.is_empty());
}

/// A root port as server firmware leaves one that only routes prefetchable
/// memory: bus numbers 1/1, memory window closed, 64-bit prefetchable window
/// 0x38_0000_0000..=0x38_001F_FFFF open, decoding on.
fn prefetch_only_port() -> FakeFunction {
    let mut bridge = port(1, 1).command(0x0007);
    bridge.regs[6] = 0x0001_0100;
    bridge.regs[8] = 0x0000_FFF0;
    bridge.regs[9] = 0x0011_0001;
    bridge.regs[10] = 0x38;
    bridge.regs[11] = 0x38;
    bridge
}

#[test]
fn a_root_port_with_only_a_prefetchable_window_is_kept_not_owned() {
    let config = FakeConfig::new();
    config.add(0, 1, 0, prefetch_only_port());
    config.add(
        1,
        0,
        0,
        FakeFunction::endpoint(0x1B36, 0x0010, 0x01, 0x08).bar_mem64(0, 0x38_0000_0000, 0x4000, true),
    );
    // An endpoint behind it the firmware left unassigned cannot be placed there.
    config.add(
        1,
        1,
        0,
        FakeFunction::endpoint(0x1000, 0x0078, 0x01, 0x04).bar_mem32(0, 0, 0x4000, false),
    );
    let routed = Routed(&config);
    let before: Vec<u32> = (0x18..0x30)
        .step_by(4)
        .map(|offset| config.reg(addr(0, 1, 0), offset))
        .collect();

    let plan = assign_resources(&routed, 0, &windows()).unwrap();
    assert!(!plan.bridges[0].owned, "{plan:#x?}");
    let after: Vec<u32> = (0x18..0x30)
        .step_by(4)
        .map(|offset| config.reg(addr(0, 1, 0), offset))
        .collect();
    assert_eq!(after, before, "bus numbers and windows untouched");
    assert_eq!(
        config.reg(addr(1, 0, 0), 0x10),
        0x0000_000C,
        "firmware's 64-bit BAR kept above 4 GiB"
    );
    assert_eq!(config.reg(addr(1, 0, 0), 0x14), 0x38);
    assert_eq!(
        plan.refused,
        [Refusal {
            function: addr(1, 1, 0),
            reason: Error::UnassignedBehindFirmwareWindow {
                address: addr(1, 1, 0),
                slot: 0,
                bridge: addr(0, 1, 0),
            }
        }]
    );
}

#[test]
fn root_bus_prefetchable_windows_are_kept_clear() {
    let config = FakeConfig::new();
    // A 32-bit prefetchable window at the bottom of the hole: 0xC000_0000..=0xC0FF_FFFF.
    let mut bridge = prefetch_only_port();
    bridge.regs[9] = 0xC0F0_C000;
    bridge.regs[10] = 0;
    bridge.regs[11] = 0;
    config.add(0, 1, 0, bridge);
    config.add(
        0,
        2,
        0,
        FakeFunction::endpoint(0x1234, 0x11E8, 0x00, 0xFF).bar_mem32(0, 0, 0x10_0000, false),
    );
    let routed = Routed(&config);
    let plan = assign_resources(&routed, 0, &windows()).unwrap();
    assert!(!plan.bridges[0].owned);
    let placed = plan.bars.iter().find(|bar| bar.function == addr(0, 2, 0)).unwrap();
    assert!(
        placed.address >= 0xC100_0000,
        "BAR at {:#x} inside the firmware's prefetchable window",
        placed.address
    );
    assert!(contains(&HOLE, &(placed.address..placed.address + placed.size)));
}

#[test]
fn host_bridges_keep_decoding_while_their_bars_are_sized() {
    let config = FakeConfig::new();
    config.add(
        0,
        0,
        0,
        FakeFunction::endpoint(0x8086, 0x29C0, 0x06, 0x00)
            .command(0x0006)
            .bar_mem32(0, 0xFED1_0000, 0x4000, false),
    );
    config.add(
        0,
        1,
        0,
        FakeFunction::endpoint(0x1234, 0x1111, 0x03, 0x00)
            .command(0x0003)
            .bar_mem32(0, 0xFD00_0000, 0x100_0000, true),
    );
    let functions = enumerate(&config, 0, 0..=0, ScanMode::FollowBridges).unwrap();
    assert_eq!(functions[0].bar(0).map(|bar| bar.size), Some(0x4000));
    assert_eq!(functions[1].bar(0).map(|bar| bar.size), Some(0x100_0000));
    // The host bridge's six BAR dwords were probed with decoding on (its command
    // register never written); the other function's with decoding off, and restored.
    assert_eq!(config.probes_with_decode_on.get(), 6);
    assert!(
        !config
            .writes
            .borrow()
            .iter()
            .any(|&(address, offset, _)| address == addr(0, 0, 0) && offset == 0x04),
        "host bridge command register written"
    );
    assert_eq!(config.reg(addr(0, 1, 0), 0x04) & 0x3, 0x3, "decoding restored");
}
