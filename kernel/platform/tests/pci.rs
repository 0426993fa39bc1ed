//! PCI enumeration, BARs, capabilities, MSI/MSI-X and ECAM on a fake configuration space.

mod common;

use common::*;
use platform::Error;
use platform::acpi::EcamWindow;
use platform::mmio::Mmio32;
use platform::mmio::VolatileMmio;
use platform::pci::*;

const LSI: u16 = 0x1000;
const QEMU: u16 = 0x1234;
const INTEL: u16 = 0x8086;

fn addr(bus: u8, device: u8, function: u8) -> PciAddress {
    PciAddress::new(0, bus, device, function)
}

/// Offsets of the megasas-like device's capabilities.
const MSIX_AT: u8 = 0x50;
const MSI_AT: u8 = 0x68;

/// A q35-like machine: host bridge, VGA, a megasas-gen2-like controller with
/// I/O + 64-bit + 32-bit BARs, MSI-X and MSI, a multi-function ICH9-like
/// device, and a bridge with QEMU's edu device behind it.
fn q35_like() -> FakeConfig {
    let config = FakeConfig::new();
    config.add(0, 0, 0, FakeFunction::endpoint(INTEL, 0x29C0, 0x06, 0x00));
    config.add(
        0,
        1,
        0,
        FakeFunction::endpoint(QEMU, 0x1111, 0x03, 0x00)
            .command(0b11)
            .bar_mem32(0, 0xFD00_0000, 16 << 20, true)
            .bar_mem32(2, 0xFEBF_0000, 4 << 10, false),
    );
    config.add(
        0,
        2,
        0,
        FakeFunction::endpoint(LSI, 0x0079, 0x01, 0x04)
            .command(0b111)
            .subsystem(LSI, 0x9261)
            .interrupt(1, 11)
            .bar_io(0, 0xC000, 256, true)
            .bar_mem64(1, 0x8_0000_0000, 16 << 10, true)
            .bar_mem32(3, 0xFEB0_0000, 256 << 10, false)
            .cap_pointer(MSIX_AT)
            .capability(MSIX_AT, 0x11, MSI_AT, 14, &[(0x2003, 0), (0x3003, 0)])
            .control_writable(MSIX_AT, 0xC000)
            .capability(
                MSI_AT,
                0x05,
                0x00,
                (1 << 8) | (1 << 7) | (0b011 << 1),
                &[(0, 0xFFFF_FFFC), (0, u32::MAX), (0, 0xFFFF), (0, u32::MAX), (0, 0)],
            )
            .control_writable(MSI_AT, 0x0071),
    );
    config.add(0, 3, 0, FakeFunction::bridge(0x1B36, 0x000C, 0, 1, 1));
    config.add(
        1,
        0,
        0,
        FakeFunction::endpoint(QEMU, 0x11E8, 0x00, 0xFF)
            .interrupt(1, 10)
            .bar_mem32(0, 0xFE80_0000, 1 << 20, false)
            .cap_pointer(0x40)
            .capability(0x40, 0x05, 0, 0, &[(0, 0xFFFF_FFFC), (0, 0xFFFF)])
            .control_writable(0x40, 0x0071),
    );
    config.add(
        0,
        0x1F,
        0,
        FakeFunction::endpoint(INTEL, 0x2918, 0x06, 0x01).multifunction(),
    );
    config.add(
        0,
        0x1F,
        2,
        FakeFunction::endpoint(INTEL, 0x2922, 0x01, 0x06)
            .prog_if(0x01)
            .bar_io(4, 0xC080, 32, true),
    );
    config.add(
        0,
        0x1F,
        3,
        FakeFunction::endpoint(INTEL, 0x2930, 0x0C, 0x05).bar_io(4, 0x0700, 64, true),
    );
    config
}

fn scan(config: &FakeConfig) -> Vec<PciFunction> {
    enumerate(config, 0, 0..=255, ScanMode::FollowBridges).unwrap()
}

fn find(functions: &[PciFunction], address: PciAddress) -> &PciFunction {
    functions
        .iter()
        .find(|function| function.address == address)
        .expect("function listed")
}

#[test]
fn enumeration_finds_every_function_in_address_order() {
    let functions = scan(&q35_like());
    let addresses: Vec<String> = functions.iter().map(|function| function.address.to_string()).collect();
    assert_eq!(
        addresses,
        [
            "0000:00:00.0",
            "0000:00:01.0",
            "0000:00:02.0",
            "0000:00:03.0",
            "0000:00:1f.0",
            "0000:00:1f.2",
            "0000:00:1f.3",
            "0000:01:00.0"
        ]
    );
    let megasas = find(&functions, addr(0, 2, 0));
    assert_eq!((megasas.vendor_id, megasas.device_id), (LSI, 0x0079));
    assert_eq!((megasas.class, megasas.subclass, megasas.revision), (0x01, 0x04, 0x01));
    assert_eq!(megasas.subsystem, Some((LSI, 0x9261)));
    assert_eq!((megasas.interrupt_pin, megasas.interrupt_line), (1, 11));
    assert!(megasas.problems.is_empty(), "{:?}", megasas.problems);
    let bridge = find(&functions, addr(0, 3, 0));
    assert_eq!(
        bridge.header,
        HeaderKind::Bridge {
            primary: 0,
            secondary: 1,
            subordinate: 1
        }
    );
    let sata = find(&functions, addr(0, 0x1F, 2));
    assert_eq!(sata.prog_if, 0x01);
}

#[test]
fn bars_are_decoded_and_sized_with_decoding_disabled_then_restored() {
    let config = q35_like();
    let before: Vec<_> = config
        .functions
        .borrow()
        .iter()
        .map(|(address, function)| (*address, function.regs))
        .collect();
    let functions = scan(&config);
    assert_eq!(
        config.probes_with_decode_on.get(),
        0,
        "a BAR was probed with decoding on"
    );
    for (address, regs) in before {
        assert_eq!(
            config.functions.borrow()[&address].regs,
            regs,
            "{address} changed by enumeration"
        );
    }

    let vga = find(&functions, addr(0, 1, 0));
    assert_eq!(
        vga.bar(0),
        Some(&Bar {
            slot: 0,
            kind: BarKind::Memory32,
            address: 0xFD00_0000,
            size: 16 << 20,
            prefetchable: true
        })
    );
    assert_eq!(vga.bars[1], BarSlot::Unused);
    assert_eq!(vga.bar(2).map(|bar| bar.size), Some(4096));

    let megasas = find(&functions, addr(0, 2, 0));
    assert_eq!(
        megasas.bar(0),
        Some(&Bar {
            slot: 0,
            kind: BarKind::Io,
            address: 0xC000,
            size: 256,
            prefetchable: false
        })
    );
    assert_eq!(
        megasas.bar(1),
        Some(&Bar {
            slot: 1,
            kind: BarKind::Memory64,
            address: 0x8_0000_0000,
            size: 16 << 10,
            prefetchable: true
        })
    );
    assert_eq!(megasas.bars[2], BarSlot::Upper64);
    assert_eq!(
        megasas.bar(3).map(|bar| (bar.address, bar.size)),
        Some((0xFEB0_0000, 256 << 10))
    );
}

#[test]
fn large_64bit_and_malformed_bars() {
    let config = FakeConfig::new();
    config.add(
        0,
        4,
        0,
        FakeFunction::endpoint(0x1AF4, 0x1042, 0x01, 0x00)
            .bar_mem64(0, 0x40_0000_0000, 8 << 30, true)
            .bar_raw(2, 0b0110, 0xFFFF_FFF0) // reserved memory type 0b11
            .bar_raw(3, 0, 0) // unimplemented
            .bar_raw(4, 0x0000_0002, 0xFFF0_0000) // below-1M type 0b01, 1 MiB
            .bar_raw(5, 0x4, 0xFFFF_FFF0), // 64-bit in the last slot
    );
    let functions = scan(&config);
    let function = &functions[0];
    assert_eq!(
        function.bar(0).map(|bar| (bar.kind, bar.size)),
        Some((BarKind::Memory64, 8 << 30))
    );
    assert_eq!(function.bars[2], BarSlot::Invalid);
    assert_eq!(function.bars[3], BarSlot::Unused);
    assert_eq!(
        function.bar(4).map(|bar| (bar.kind, bar.size)),
        Some((BarKind::MemoryBelow1M, 1 << 20))
    );
    assert_eq!(function.bars[5], BarSlot::Invalid);
    assert_eq!(
        function.problems.as_slice(),
        [
            Error::BarReservedType {
                address: addr(0, 4, 0),
                slot: 2,
                raw: 0b0110
            },
            Error::Bar64InLastSlot {
                address: addr(0, 4, 0),
                slot: 5
            },
        ]
    );
}

#[test]
fn io_bar_with_full_32bit_decoder_and_bridge_bars() {
    let config = FakeConfig::new();
    config.add(
        0,
        0,
        0,
        FakeFunction::endpoint(1, 2, 0x02, 0x00).bar_io(0, 0x1_0000, 128, false),
    );
    config.add(
        0,
        1,
        0,
        FakeFunction::bridge(3, 4, 0, 0, 0)
            .bar_mem32(0, 0xE000_0000, 4096, false)
            .bar_mem32(2, 0xF000_0000, 4096, false),
    );
    let functions = scan(&config);
    assert_eq!(
        functions[0].bar(0).map(|bar| (bar.address, bar.size)),
        Some((0x1_0000, 128))
    );
    assert_eq!(functions[1].bar(0).map(|bar| bar.size), Some(4096));
    assert_eq!(
        functions[1].bars[2],
        BarSlot::Unused,
        "bridges have two BARs; dword 0x18 is bus numbers"
    );
}

#[test]
fn capabilities_msi_and_msix_are_parsed() {
    let functions = scan(&q35_like());
    let megasas = find(&functions, addr(0, 2, 0));
    let ids: Vec<(u8, u8)> = megasas.capabilities.iter().map(|cap| (cap.id, cap.offset)).collect();
    assert_eq!(ids, [(CAP_MSIX, MSIX_AT), (CAP_MSI, MSI_AT)]);
    let msix = megasas.msix.unwrap();
    assert_eq!(
        (
            msix.table_size,
            msix.table_bir,
            msix.table_offset,
            msix.pba_bir,
            msix.pba_offset
        ),
        (15, 3, 0x2000, 3, 0x3000)
    );
    assert_eq!(
        msix.table_region(megasas.address, &megasas.bars),
        Ok((0xFEB0_2000, 15 * 16))
    );
    assert_eq!(msix.pba_region(megasas.address, &megasas.bars), Ok((0xFEB0_3000, 8)));
    let msi = megasas.msi.unwrap();
    assert_eq!(
        (msi.is_64bit, msi.per_vector_masking, msi.vectors_capable),
        (true, true, 8)
    );
    let edu = find(&functions, addr(1, 0, 0));
    let edu_msi = edu.msi.unwrap();
    assert_eq!(
        (edu_msi.is_64bit, edu_msi.per_vector_masking, edu_msi.vectors_capable),
        (false, false, 1)
    );
    assert!(edu.msix.is_none());
    assert!(find(&functions, addr(0, 0, 0)).capabilities.is_empty());
}

#[test]
fn msix_table_location_is_checked_against_the_bar() {
    let functions = scan(&q35_like());
    let megasas = find(&functions, addr(0, 2, 0));
    let mut msix = megasas.msix.unwrap();
    msix.table_bir = 0;
    assert_eq!(
        msix.table_region(megasas.address, &megasas.bars),
        Err(Error::MsixBir {
            address: megasas.address,
            bir: 0
        })
    );
    msix.table_bir = 2;
    assert_eq!(
        msix.table_region(megasas.address, &megasas.bars),
        Err(Error::MsixBir {
            address: megasas.address,
            bir: 2
        })
    );
    msix.table_bir = 7;
    assert!(msix.table_region(megasas.address, &megasas.bars).is_err());
    msix.table_bir = 3;
    msix.table_offset = (256 << 10) - 16;
    assert!(matches!(
        msix.table_region(megasas.address, &megasas.bars),
        Err(Error::MsixOutOfBar { bir: 3, .. })
    ));
}

#[test]
fn malformed_capability_lists_are_reported_and_the_function_kept() {
    let config = FakeConfig::new();
    config.add(
        0,
        0,
        0,
        FakeFunction::endpoint(1, 1, 0x02, 0x00)
            .cap_pointer(0x40)
            .capability(0x40, 0x01, 0x50, 0, &[])
            .capability(0x50, 0x09, 0x40, 0, &[]),
    );
    config.add(0, 1, 0, FakeFunction::endpoint(1, 2, 0x02, 0x00).cap_pointer(0x20));
    config.add(
        0,
        2,
        0,
        FakeFunction::endpoint(1, 3, 0x02, 0x00)
            .cap_pointer(0x44)
            .capability(0x44, 0x05, 0x00, 0x0180, &[]),
    );
    config.add(
        0,
        3,
        0,
        FakeFunction::endpoint(1, 4, 0x02, 0x00)
            .cap_pointer(0xF8)
            .capability(0xF8, 0x05, 0x00, 0x0180, &[]),
    );
    config.add(
        0,
        4,
        0,
        FakeFunction::endpoint(1, 5, 0x02, 0x00)
            .cap_pointer(0x43)
            .capability(0x40, 0x10, 0x00, 0, &[]),
    );
    let functions = scan(&config);
    assert_eq!(functions.len(), 5);
    assert_eq!(
        functions[0].problems.as_slice(),
        [Error::CapabilityLoop {
            address: addr(0, 0, 0),
            offset: 0x40
        }]
    );
    assert_eq!(
        functions[1].problems.as_slice(),
        [Error::CapabilityPointer {
            address: addr(0, 1, 0),
            pointer: 0x20
        }]
    );
    // 64-bit MSI with masking at 0x44 fits (0x44 + 24 <= 256); at 0xF8 it would not.
    assert!(functions[2].msi.is_some());
    assert_eq!(
        functions[3].problems.as_slice(),
        [Error::CapabilityOverrun {
            address: addr(0, 3, 0),
            offset: 0xF8,
            id: 0x05,
            len: 0x18
        }]
    );
    assert!(functions[3].msi.is_none());
    // Reserved low pointer bits are ignored.
    assert_eq!(functions[4].capabilities[0].offset, 0x40);
}

#[test]
fn functions_other_than_zero_need_the_multifunction_bit() {
    let config = FakeConfig::new();
    config.add(0, 5, 0, FakeFunction::endpoint(1, 1, 0x02, 0x00));
    config.add(0, 5, 1, FakeFunction::endpoint(1, 2, 0x02, 0x00));
    assert_eq!(scan(&config).len(), 1);
    config
        .functions
        .borrow_mut()
        .insert(addr(0, 5, 0), FakeFunction::endpoint(1, 1, 0x02, 0x00).multifunction());
    assert_eq!(scan(&config).len(), 2);
}

#[test]
fn bridge_loops_terminate_and_all_bus_mode_finds_orphans() {
    let config = FakeConfig::new();
    config.add(0, 0, 0, FakeFunction::bridge(1, 1, 0, 1, 2));
    config.add(1, 0, 0, FakeFunction::bridge(1, 2, 1, 0, 0)); // points back to bus 0
    config.add(1, 1, 0, FakeFunction::bridge(1, 3, 1, 1, 1)); // points to itself
    config.add(1, 2, 0, FakeFunction::bridge(1, 4, 1, 2, 2));
    config.add(2, 0, 0, FakeFunction::endpoint(1, 5, 0x02, 0x00));
    config.add(9, 0, 0, FakeFunction::endpoint(1, 6, 0x02, 0x00)); // behind no bridge
    let followed = enumerate(&config, 0, 0..=255, ScanMode::FollowBridges).unwrap();
    assert_eq!(followed.len(), 5);
    let reads = config.reads.get();
    assert!(reads < 4 * 32 * 8 * 20, "each bus scanned once ({reads} reads)");
    let all = enumerate(&config, 0, 0..=255, ScanMode::AllBuses).unwrap();
    assert_eq!(all.len(), 6);
    let limited = enumerate(&config, 0, 0..=1, ScanMode::AllBuses).unwrap();
    assert_eq!(limited.len(), 4, "buses outside the range are not probed");
}

#[test]
fn multifunction_host_bridge_exposes_root_buses() {
    let config = FakeConfig::new();
    config.add(0, 0, 0, FakeFunction::endpoint(INTEL, 1, 0x06, 0x00).multifunction());
    config.add(0, 0, 1, FakeFunction::endpoint(INTEL, 2, 0x06, 0x00));
    config.add(1, 3, 0, FakeFunction::endpoint(INTEL, 3, 0x02, 0x00));
    assert_eq!(scan(&config).len(), 3);
}

#[test]
fn listing_looks_like_lspci() {
    let functions = scan(&q35_like());
    let text = PciListing(&functions).to_string();
    assert!(
        text.contains("02.0 Raid Controller [0104]: 1000:0079 (rev 01)"),
        "{text}"
    );
    assert!(text.contains("BAR0: I/O ports at 0xc000 [size=256]"), "{text}");
    assert!(
        text.contains("BAR1: 64-bit memory at 0x800000000 [size=16K] prefetchable"),
        "{text}"
    );
    assert!(
        text.contains("BAR0: 32-bit memory at 0xfd000000 [size=16M] prefetchable"),
        "{text}"
    );
    assert!(
        text.contains("cap [50] MSI-X: 15 entries, table BAR3+0x2000, PBA BAR3+0x3000"),
        "{text}"
    );
    assert!(
        text.contains("cap [68] MSI: 64-bit, 8 vector(s), per-vector masking"),
        "{text}"
    );
    assert!(text.contains("interrupt: pin A line 11"), "{text}");
    assert!(
        text.contains("03.0 Pci Pci Bridge [0604]: 1b36:000c (rev 01) bus: primary=00 secondary=01 subordinate=01"),
        "{text}"
    );
    assert!(text.contains("01:00.0 Unclassified device [00ff]: 1234:11e8"), "{text}");
    assert_eq!(text.matches("problem").count(), 0);
}

#[test]
fn driver_matching_by_id_and_class() {
    static MEGASAS: [DeviceMatch; 2] = [DeviceMatch::id(LSI, 0x0079), DeviceMatch::id(LSI, 0x0411)];
    static AHCI: [DeviceMatch; 1] = [DeviceMatch::class(0x01, 0x06).with_prog_if(0x01)];
    static EDU: [DeviceMatch; 1] = [DeviceMatch::id(QEMU, 0x11E8)];
    let drivers = [
        PciDriver {
            name: "megasas",
            matches: &MEGASAS,
        },
        PciDriver {
            name: "ahci",
            matches: &AHCI,
        },
        PciDriver {
            name: "edu",
            matches: &EDU,
        },
    ];
    let functions = scan(&q35_like());
    let claimed: Vec<(String, &str)> = functions
        .iter()
        .filter_map(|function| {
            match_driver(&drivers, function).map(|driver| (function.address.to_string(), driver.name))
        })
        .collect();
    assert_eq!(
        claimed,
        [
            ("0000:00:02.0".to_string(), "megasas"),
            ("0000:00:1f.2".to_string(), "ahci"),
            ("0000:01:00.0".to_string(), "edu")
        ]
    );
    let sata = find(&functions, addr(0, 0x1F, 2));
    assert!(!DeviceMatch::class(0x01, 0x06).with_prog_if(0x02).matches(sata));
    assert!(DeviceMatch::default().matches(sata), "an empty rule matches anything");
}

#[test]
fn enable_device_and_intx_disable_keep_status_bits() {
    let config = q35_like();
    let edu = addr(1, 0, 0);
    config.set_reg(edu, 0x04, (0x8000 | 0x0010) << 16); // detected parity error (RW1C) + capability list
    let command = enable_device(&config, edu, true, false, true).unwrap();
    assert!(command.contains(CommandRegister::MEMORY_ENABLE | CommandRegister::BUS_MASTER_ENABLE));
    assert!(!command.contains(CommandRegister::IO_ENABLE));
    assert_eq!(config.reg(edu, 0x04) & 0b111, 0b110);
    assert_eq!(
        config.reg(edu, 0x04) >> 16,
        0x8010,
        "status error bit was cleared by a write-back"
    );
    set_intx_disabled(&config, edu, true).unwrap();
    assert_eq!(config.reg(edu, 0x04) & 0x400, 0x400);
    set_intx_disabled(&config, edu, false).unwrap();
    assert_eq!(config.reg(edu, 0x04) & 0x7FF, 0b110);
}

#[test]
fn msi_programming_64bit_with_masking() {
    let config = q35_like();
    let functions = scan(&config);
    let megasas = find(&functions, addr(0, 2, 0));
    let msi = megasas.msi.unwrap();
    let message = MsiMessage::xapic(3, 0x48).unwrap();
    msi_program(&config, megasas.address, &msi, message, 4).unwrap();
    let at = u16::from(MSI_AT);
    let control = config.reg(megasas.address, at) >> 16;
    assert_eq!(control & 1, 1, "enabled");
    assert_eq!((control >> 4) & 0b111, 2, "multiple message enable = log2(4)");
    assert_eq!(config.reg(megasas.address, at + 4), 0xFEE0_3000);
    assert_eq!(config.reg(megasas.address, at + 8), 0);
    assert_eq!(config.reg(megasas.address, at + 12) & 0xFFFF, 0x48);
    assert_eq!(
        config.reg(megasas.address, at + 16),
        !0b1111,
        "4 vectors unmasked, the rest masked"
    );
    assert_eq!(
        msi_program(&config, megasas.address, &msi, message, 3),
        Err(Error::MsiVectorCount {
            requested: 3,
            capable: 8
        })
    );
    assert_eq!(
        msi_program(&config, megasas.address, &msi, message, 16),
        Err(Error::MsiVectorCount {
            requested: 16,
            capable: 8
        })
    );
    msi_disable(&config, megasas.address, &msi).unwrap();
    assert_eq!((config.reg(megasas.address, at) >> 16) & 1, 0);
}

#[test]
fn msi_programming_32bit_writes_data_at_offset_8() {
    let config = q35_like();
    let functions = scan(&config);
    let edu = find(&functions, addr(1, 0, 0));
    let msi = edu.msi.unwrap();
    msi_program(&config, edu.address, &msi, MsiMessage::xapic(1, 0x31).unwrap(), 1).unwrap();
    assert_eq!(config.reg(edu.address, 0x44), 0xFEE0_1000);
    assert_eq!(config.reg(edu.address, 0x48) & 0xFFFF, 0x31);
    assert_eq!((config.reg(edu.address, 0x40) >> 16) & 0x71, 1, "enabled, one vector");
}

#[test]
fn msix_control_bits() {
    let config = q35_like();
    let functions = scan(&config);
    let megasas = find(&functions, addr(0, 2, 0));
    let msix = megasas.msix.unwrap();
    let at = u16::from(MSIX_AT);
    msix_set_control(&config, megasas.address, &msix, true, true).unwrap();
    assert_eq!(config.reg(megasas.address, at) >> 16, 0xC000 | 14);
    msix_set_control(&config, megasas.address, &msix, true, false).unwrap();
    assert_eq!(config.reg(megasas.address, at) >> 16, 0x8000 | 14);
    msix_set_control(&config, megasas.address, &msix, false, false).unwrap();
    assert_eq!(config.reg(megasas.address, at) >> 16, 14);
}

#[test]
fn msix_table_programming_mask_and_unmask() {
    let mmio = FakeMmio::new(0x4000);
    mmio.write32(0x2000 + 12, 0xABC0_0001).unwrap(); // steering-tag-like upper bits must survive
    let table = MsixTable::new(&mmio, 0x2000, 15).unwrap();
    for index in 0..15u16 {
        table
            .program(
                index,
                MsiMessage::xapic(u32::from(index % 4), 0x40 + index as u8).unwrap(),
            )
            .unwrap();
    }
    let entry = table.read(5).unwrap();
    assert_eq!(
        entry.message,
        MsiMessage {
            address: 0xFEE0_1000,
            data: 0x45
        }
    );
    assert!(entry.masked, "programmed entries stay masked");
    table.unmask(5).unwrap();
    assert!(!table.read(5).unwrap().masked);
    table.unmask(0).unwrap();
    assert_eq!(mmio.read32(0x2000 + 12).unwrap(), 0xABC0_0000);
    table.mask_all().unwrap();
    assert!((0..15).all(|index| table.read(index).unwrap().masked));
    assert_eq!(
        table.program(15, MsiMessage::xapic(0, 0x40).unwrap()),
        Err(Error::MsixEntryIndex {
            index: 15,
            table_size: 15
        })
    );

    // The mask write precedes the address/data writes of an entry.
    mmio.writes.borrow_mut().clear();
    table.program(2, MsiMessage::xapic(1, 0x50).unwrap()).unwrap();
    let offsets: Vec<usize> = mmio.writes.borrow().iter().map(|&(offset, _)| offset).collect();
    assert_eq!(offsets, [0x2000 + 32 + 12, 0x2000 + 32, 0x2000 + 36, 0x2000 + 40]);

    assert!(MsixTable::new(&mmio, 0x3F00, 32).is_err(), "table past the mapping");
    assert!(MsixTable::new(&mmio, 0x2004, 1).is_err(), "misaligned table");
    assert!(MsixTable::new(&mmio, usize::MAX - 8, 2).is_err());

    mmio.write32(0x3000, 1 << 5).unwrap();
    assert!(msix_pending(&&mmio, 0x3000, 5).unwrap());
    assert!(!msix_pending(&&mmio, 0x3000, 4).unwrap());
    // A PBA offset near usize::MAX: the word offset is checked, not wrapped.
    assert!(matches!(
        msix_pending(&&mmio, usize::MAX - 3, 2047),
        Err(Error::MmioRange { .. })
    ));
}

#[test]
fn msi_messages_use_the_xapic_format() {
    let message = MsiMessage::xapic(0x2A, 0xE0).unwrap();
    assert_eq!(message.address, 0xFEE2_A000);
    assert_eq!(message.data, 0xE0, "fixed delivery, edge");
    assert_eq!((message.destination(), message.vector()), (0x2A, 0xE0));
    assert_eq!(
        MsiMessage::xapic(256, 0x40),
        Err(Error::ApicIdNeedsRemapping { apic_id: 256 })
    );
    assert_eq!(MsiMessage::xapic(0, 0x1F), Err(Error::ExceptionVector { vector: 0x1F }));
}

#[test]
fn ecam_and_legacy_addresses() {
    let window = EcamWindow {
        base: 0xB000_0000,
        segment: 0,
        bus_start: 0,
        bus_end: 0xFF,
    };
    assert_eq!(ecam_offset(&window, addr(0, 0, 0), 0), Ok(0));
    assert_eq!(
        ecam_offset(&window, addr(3, 0x1F, 7), 0xFFC),
        Ok((3 << 20) | (0x1F << 15) | (7 << 12) | 0xFFC)
    );
    assert_eq!(
        ecam_offset(&window, addr(0, 0, 0), 0x1000),
        Err(Error::ConfigOffset {
            offset: 0x1000,
            limit: 0x1000
        })
    );
    assert!(ecam_offset(&window, addr(0, 0, 0), 2).is_err());
    let high = EcamWindow {
        base: 0,
        segment: 1,
        bus_start: 0x10,
        bus_end: 0x1F,
    };
    assert_eq!(ecam_offset(&high, PciAddress::new(1, 0x11, 0, 0), 4), Ok((1 << 20) | 4));
    assert_eq!(
        ecam_offset(&high, PciAddress::new(1, 0x20, 0, 0), 0),
        Err(Error::EcamBus {
            bus: 0x20,
            start: 0x10,
            end: 0x1F
        })
    );
    assert_eq!(
        ecam_offset(&high, PciAddress::new(0, 0x11, 0, 0), 0),
        Err(Error::EcamSegment { segment: 0, window: 1 })
    );

    assert_eq!(legacy_config_address(addr(0, 0, 0), 0), Ok(0x8000_0000));
    assert_eq!(legacy_config_address(addr(0xAB, 0x1F, 5), 0xFC), Ok(0x80AB_FDFC));
    assert_eq!(
        legacy_config_address(addr(0, 0, 0), 0x100),
        Err(Error::ConfigOffset {
            offset: 0x100,
            limit: 0x100
        })
    );
    assert!(legacy_config_address(addr(0, 0, 0), 0x41).is_err());
    assert_eq!(
        legacy_config_address(PciAddress::new(1, 0, 0, 0), 0),
        Err(Error::ConfigSegment {
            address: PciAddress::new(1, 0, 0, 0)
        })
    );
}

#[test]
fn enumeration_through_ecam_over_volatile_memory() {
    // Two buses of ECAM laid out in ordinary memory.
    let mut memory = vec![u32::MAX; (2 << 20) / 4];
    let mut place = |bus: usize, device: usize, function: usize, regs: &[(usize, u32)]| {
        let base = ((bus << 20) | (device << 15) | (function << 12)) / 4;
        for dword in 0..1024 {
            memory[base + dword] = 0;
        }
        for &(offset, value) in regs {
            memory[base + offset / 4] = value;
        }
    };
    place(0, 0, 0, &[(0x00, 0x29C0_8086), (0x08, 0x0600_0000)]);
    place(
        0,
        2,
        0,
        &[
            (0x00, 0x0079_1000),
            (0x08, 0x0104_0001),
            (0x04, 0x0010_0000),
            (0x34, 0x50),
            (0x50, 0x000E_0011),
            (0x54, 0x2003),
            (0x58, 0x3003),
        ],
    );
    place(1, 0, 0, &[(0x00, 0x11E8_1234), (0x08, 0x00FF_0010)]);
    let window = EcamWindow {
        base: 0xB000_0000,
        segment: 0,
        bus_start: 0,
        bus_end: 1,
    };
    // SAFETY: `memory` is a live, 4-aligned buffer of exactly 2 MiB, used only through `mmio` below.
    let mmio = unsafe { VolatileMmio::new(memory.as_mut_ptr().cast(), memory.len() * 4) };
    let access = EcamAccess::new(mmio, window).unwrap();
    let functions = enumerate(&access, 0, 0..=1, ScanMode::AllBuses).unwrap();
    let ids: Vec<(u16, u16)> = functions
        .iter()
        .map(|function| (function.vendor_id, function.device_id))
        .collect();
    assert_eq!(ids, [(INTEL, 0x29C0), (LSI, 0x0079), (QEMU, 0x11E8)]);
    assert_eq!(functions[1].msix.map(|msix| msix.table_size), Some(15));
    // Out-of-window reads look like absent functions.
    // SAFETY: reads of the fake window are side-effect free.
    assert_eq!(unsafe { access.read(addr(2, 0, 0), 0) }, u32::MAX);

    let small = FakeMmio::new(4096);
    assert!(
        EcamAccess::new(&small, window).is_err(),
        "mapping shorter than the window"
    );
}

/// A 64-bit BAR that sizes to 2^63: were it accepted, placing it would wrap
/// and later BARs would land at physical 0. It is refused
/// when read: the slot is `Invalid` and the function's problems say why.
#[test]
fn bar_sizing_to_2_pow_63_is_refused() {
    let config = FakeConfig::new();
    config.add(
        0,
        4,
        0,
        FakeFunction::endpoint(0x1AF4, 0x1042, 0x01, 0x00)
            .bar_mem64(0, 0, 1 << 63, false)
            .bar_mem32(2, 0, 0x1000, false),
    );
    let functions = scan(&config);
    let function = &functions[0];
    assert_eq!(function.bars[0], BarSlot::Invalid);
    assert_eq!(function.bars[1], BarSlot::Upper64);
    assert_eq!(function.bar(2).map(|bar| bar.size), Some(0x1000));
    assert_eq!(
        function.problems.as_slice(),
        [Error::BarTooLarge {
            address: addr(0, 4, 0),
            slot: 0,
            size: 1 << 63
        }]
    );
    assert!(function.problems[0].to_string().contains("BAR0"));
}

/// A firmware-assigned 64-bit BAR whose address plus size passes the 52-bit
/// physical address space (or 2^64) is refused the same way.
#[test]
fn bar_whose_end_passes_the_address_space_is_refused() {
    let config = FakeConfig::new();
    config.add(
        0,
        4,
        0,
        FakeFunction::endpoint(0x1AF4, 0x1042, 0x01, 0x00).bar_mem64(0, 0xFFFF_FFFF_0000_0000, 1 << 32, false),
    );
    let functions = scan(&config);
    assert_eq!(functions[0].bars[0], BarSlot::Invalid);
    assert_eq!(
        functions[0].problems.as_slice(),
        [Error::BarAddress {
            address: addr(0, 4, 0),
            slot: 0,
            base: 0xFFFF_FFFF_0000_0000,
            size: 1 << 32
        }]
    );
}

// ---------------------------------------------------------------------------------------------
// Every root bus (servers: one host bridge per socket or I/O stack)

const NVME_ID: u16 = 0x0010;
const REDHAT: u16 = 0x1B36;

/// A two-socket-like segment 0: root bus 00 holds only a host bridge; root
/// bus 40 (a second host bridge, or QEMU's pxb-pcie) has a root port with
/// an NVMe controller behind it, assigned by the firmware; root bus 80 has a
/// controller whose BAR the firmware left unassigned and a root port with no
/// bus numbers (what qboot leaves behind a pxb-pcie).
fn two_socket_like() -> FakeConfig {
    let config = FakeConfig::new();
    config.add(0, 0, 0, FakeFunction::endpoint(INTEL, 0x29C0, 0x06, 0x00));
    config.add(0x40, 0, 0, FakeFunction::bridge(REDHAT, 0x000C, 0x40, 0x41, 0x41));
    config.add(
        0x41,
        0,
        0,
        FakeFunction::endpoint(REDHAT, NVME_ID, 0x01, 0x08)
            .prog_if(0x02)
            .bar_mem64(0, 0x38_0000_0000, 16 << 10, false),
    );
    config.add(
        0x80,
        0,
        0,
        FakeFunction::endpoint(LSI, 0x005D, 0x01, 0x04).bar_mem64(0, 0, 1 << 20, false),
    );
    config.add(0x80, 1, 0, FakeFunction::bridge(REDHAT, 0x000C, 0, 0, 0));
    config
}

#[test]
fn following_bridges_from_bus_0_misses_the_other_root_buses() {
    let functions = enumerate(&two_socket_like(), 0, 0..=255, ScanMode::FollowBridges).unwrap();
    assert_eq!(functions.len(), 1, "only the host bridge of bus 00");
}

#[test]
fn every_root_finds_devices_under_each_root_bus_and_marks_the_root() {
    let config = two_socket_like();
    let functions = enumerate(&config, 0, 0..=255, ScanMode::EveryRoot).unwrap();
    let found: Vec<(String, u8)> = functions
        .iter()
        .map(|function| (function.address.to_string(), function.root_bus))
        .collect();
    assert_eq!(
        found,
        [
            ("0000:00:00.0".to_string(), 0x00),
            ("0000:40:00.0".to_string(), 0x40),
            ("0000:41:00.0".to_string(), 0x40),
            ("0000:80:00.0".to_string(), 0x80),
            ("0000:80:01.0".to_string(), 0x80),
        ]
    );
    // Bus 41 is reached through the root port: it is not a root of its own.
    assert_eq!(root_buses(&functions), [(0, 0x00), (0, 0x40), (0, 0x80)]);
    assert_eq!(find_root_buses(&config, 0, 0..=255).unwrap(), [0x00, 0x40, 0x80]);
    let nvme = find(&functions, addr(0x41, 0, 0));
    assert_eq!(nvme.bar(0).map(|bar| bar.address), Some(0x38_0000_0000));
}

#[test]
fn a_bus_behind_a_bridge_of_bus_0_is_not_a_root() {
    let config = two_socket_like();
    config.add(0, 3, 0, FakeFunction::bridge(REDHAT, 0x000C, 0, 1, 2));
    config.add(1, 0, 0, FakeFunction::endpoint(QEMU, 0x11E8, 0x00, 0xFF));
    let functions = enumerate(&config, 0, 0..=255, ScanMode::EveryRoot).unwrap();
    assert_eq!(find(&functions, addr(1, 0, 0)).root_bus, 0);
    assert_eq!(find_root_buses(&config, 0, 0..=255).unwrap(), [0x00, 0x40, 0x80]);
    // Only the range given is scanned.
    assert_eq!(find_root_buses(&config, 0, 0x41..=0x7F).unwrap(), [0x41]);
    // A bridge at function 3 of a multi-function device under root 40 leads to bus 50.
    config.add(
        0x40,
        2,
        0,
        FakeFunction::endpoint(INTEL, 0x2020, 0x08, 0x80).multifunction(),
    );
    config.add(0x40, 2, 3, FakeFunction::bridge(REDHAT, 0x000C, 0x40, 0x50, 0x50));
    config.add(0x50, 0, 0, FakeFunction::endpoint(QEMU, 0x11E8, 0x00, 0xFF));
    assert_eq!(find_root_buses(&config, 0, 0..=255).unwrap(), [0x00, 0x40, 0x80]);
    let functions = enumerate(&config, 0, 0..=255, ScanMode::EveryRoot).unwrap();
    assert_eq!(find(&functions, addr(0x50, 0, 0)).root_bus, 0x40);
    assert_eq!(root_buses(&functions), [(0, 0x00), (0, 0x40), (0, 0x80)]);
}

#[test]
fn every_root_costs_one_probe_per_empty_slot() {
    let config = two_socket_like();
    enumerate(&config, 0, 0..=255, ScanMode::EveryRoot).unwrap();
    // 256 buses x 32 devices probed once each, plus the few functions' own registers.
    let reads = config.reads.get();
    assert!(reads >= 256 * 32, "{reads}");
    assert!(reads < 256 * 32 + 400, "{reads}");
    config.reads.set(0);
    find_root_buses(&config, 0, 0..=255).unwrap();
    let reads = config.reads.get();
    assert!(reads < 256 * 32 + 40, "{reads}");
}

#[test]
fn outside_the_laid_out_tree_unassigned_bars_and_unnumbered_bridges_are_refused() {
    let config = two_socket_like();
    // Under root 00 an unassigned BAR is baremq's to place: not refused here.
    config.add(
        0,
        2,
        0,
        FakeFunction::endpoint(LSI, 0x0079, 0x01, 0x04).bar_mem32(0, 0, 1 << 14, false),
    );
    let mut functions = enumerate(&config, 0, 0..=255, ScanMode::EveryRoot).unwrap();
    refuse_outside_laid_out_tree(&mut functions, Some((0, 0)));
    assert_eq!(find(&functions, addr(0, 2, 0)).refused, None);
    assert_eq!(
        find(&functions, addr(0x41, 0, 0)).refused,
        None,
        "firmware-assigned NVMe"
    );
    assert_eq!(find(&functions, addr(0x40, 0, 0)).refused, None, "numbered root port");
    assert_eq!(
        find(&functions, addr(0x80, 0, 0)).refused,
        Some(Error::UnassignedUnderOtherRoot {
            address: addr(0x80, 0, 0),
            slot: 0,
            root: 0x80
        })
    );
    assert_eq!(
        find(&functions, addr(0x80, 1, 0)).refused,
        Some(Error::BridgeNotNumberedUnderOtherRoot {
            bridge: addr(0x80, 1, 0),
            root: 0x80
        })
    );
    // A refused function is matched by no driver.
    static LSI_MATCH: [DeviceMatch; 1] = [DeviceMatch::id(LSI, 0x005D)];
    let drivers = [PciDriver {
        name: "fusion",
        matches: &LSI_MATCH,
    }];
    assert!(match_driver(&drivers, find(&functions, addr(0x80, 0, 0))).is_none());

    // With nothing laid out (no segment 0), root 00 gets the same treatment.
    let mut functions = enumerate(&config, 0, 0..=255, ScanMode::EveryRoot).unwrap();
    refuse_outside_laid_out_tree(&mut functions, None);
    assert!(matches!(
        find(&functions, addr(0, 2, 0)).refused,
        Some(Error::UnassignedUnderOtherRoot { root: 0, .. })
    ));
}

#[test]
fn listing_shows_segment_root_and_refusal() {
    let config = two_socket_like();
    config.add_at(
        1,
        0x20,
        0,
        0,
        FakeFunction::endpoint(REDHAT, NVME_ID, 0x01, 0x08).bar_mem64(0, 0x40_0000_0000, 16 << 10, false),
    );
    let mut functions = enumerate(&config, 0, 0..=255, ScanMode::EveryRoot).unwrap();
    functions.extend(enumerate(&config, 1, 0..=255, ScanMode::EveryRoot).unwrap());
    refuse_outside_laid_out_tree(&mut functions, Some((0, 0)));
    assert_eq!(root_buses(&functions), [(0, 0x00), (0, 0x40), (0, 0x80), (1, 0x20)]);
    let text = PciListing(&functions).to_string();
    assert!(
        text.contains("0000:41:00.0 Nvme Controller [0108]: 1b36:0010 (rev 01) root=40\n"),
        "{text}"
    );
    assert!(
        text.contains("0000:40:00.0 Pci Pci Bridge [0604]: 1b36:000c (rev 01) bus: primary=40 secondary=41 subordinate=41 root=40\n"),
        "{text}"
    );
    assert!(
        text.contains("0001:20:00.0 Nvme Controller [0108]: 1b36:0010 (rev 01) root=20\n"),
        "{text}"
    );
    assert!(
        text.contains("\trefused: 0000:80:00.0: BAR0 is unassigned under root bus 80"),
        "{text}"
    );
    assert!(
        text.contains("\trefused: bridge 0000:80:01.0 under root bus 80 has no bus numbers from the firmware"),
        "{text}"
    );
}

#[test]
fn ecam_windows_route_each_segment_and_bus_to_its_window() {
    // Segment 0 split in two windows (buses 0-1 and 0x40-0x41), segment 1 in one (0x20-0x20),
    // and a later window overlapping segment 0's first one (never used: the first wins).
    let window = |base: u64, segment: u16, bus_start: u8, bus_end: u8| EcamWindow {
        base,
        segment,
        bus_start,
        bus_end,
    };
    let low = window(0xB000_0000, 0, 0, 1);
    let high = window(0xC000_0000, 0, 0x40, 0x41);
    let other = window(0xD000_0000, 1, 0x20, 0x20);
    let shadow = window(0xE000_0000, 0, 0, 0);
    let mmio: Vec<FakeMmio> = [low, high, other, shadow]
        .iter()
        .map(|w| FakeMmio::new(w.region_len() as usize))
        .collect();
    let windows = EcamWindows::new(vec![
        EcamAccess::new(&mmio[0], low).unwrap(),
        EcamAccess::new(&mmio[1], high).unwrap(),
        EcamAccess::new(&mmio[2], other).unwrap(),
        EcamAccess::new(&mmio[3], shadow).unwrap(),
    ]);
    assert_eq!(windows.segments(), [(0, 0..=0x41), (1, 0x20..=0x20)]);
    // SAFETY: the fakes accept any in-window offset; out-of-window accesses are dropped.
    unsafe {
        windows.write(PciAddress::new(0, 0, 0, 0), 0x00, 0x1111);
        windows.write(PciAddress::new(0, 0x41, 0, 0), 0x00, 0x2222);
        windows.write(PciAddress::new(1, 0x20, 3, 0), 0x04, 0x3333);
        windows.write(PciAddress::new(1, 0x21, 0, 0), 0x00, 0x4444);
        windows.write(PciAddress::new(2, 0, 0, 0), 0x00, 0x5555);
    }
    assert_eq!(*mmio[0].writes.borrow(), [(0, 0x1111)]);
    assert_eq!(
        *mmio[1].writes.borrow(),
        [(1 << 20, 0x2222)],
        "bus 0x41 is the window's second bus"
    );
    assert_eq!(*mmio[2].writes.borrow(), [((3 << 15) | 4, 0x3333)]);
    assert!(
        mmio[3].writes.borrow().is_empty(),
        "an overlapping later window is never used"
    );
    // SAFETY: as above.
    unsafe {
        assert_eq!(windows.read(PciAddress::new(0, 0x41, 0, 0), 0), 0x2222);
        assert_eq!(
            windows.read(PciAddress::new(0, 0x20, 0, 0), 0),
            u32::MAX,
            "a bus in no window"
        );
        assert_eq!(windows.read(PciAddress::new(1, 0x20, 3, 0), 4), 0x3333);
        assert_eq!(
            windows.read(PciAddress::new(3, 0, 0, 0), 0),
            u32::MAX,
            "a segment in no window"
        );
    }
}
