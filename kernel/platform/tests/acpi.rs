//! ACPI discovery and parsing on fixture tables, well-formed and malformed.

mod common;

use common::*;
use platform::acpi::{AcpiTables, EcamWindow, Madt, Mcfg, Polarity, RootKind, Rsdp, Sdt, SliceMemory, Trigger};
use platform::{Error, TableSignature};

fn madt_from(bytes: Vec<u8>) -> platform::Result<Madt> {
    let memory = SliceMemory::new(0x1000, &bytes);
    let table = Sdt::load(&memory, 0x1000, Some(TableSignature::MADT), 36)?;
    Madt::parse(&memory, &table)
}

fn mcfg_from(bytes: Vec<u8>) -> platform::Result<Mcfg> {
    let memory = SliceMemory::new(0x1000, &bytes);
    let table = Sdt::load(&memory, 0x1000, Some(TableSignature::MCFG), 36)?;
    Mcfg::parse(&memory, &table)
}

// ---- RSDP ------------------------------------------------------------------------------------

#[test]
fn rsdp_v1_and_v2_copies_parse() {
    let v1 = Rsdp::parse(&rsdp_v1(0x1234_5678)).unwrap();
    assert_eq!((v1.revision, v1.rsdt_address, v1.xsdt_address), (0, 0x1234_5678, None));
    assert_eq!(&v1.oem_id, b"BOCHS ");
    let v2 = Rsdp::parse(&rsdp_v2(0x1000, 0x1_0000_2000)).unwrap();
    assert_eq!(
        (v2.revision, v2.rsdt_address, v2.xsdt_address),
        (2, 0x1000, Some(0x1_0000_2000))
    );
}

#[test]
fn rsdp_rejects_bad_signature_checksums_length_and_short_copies() {
    let mut bad_signature = rsdp_v1(0x1000);
    bad_signature[0] = b'X';
    assert!(matches!(Rsdp::parse(&bad_signature), Err(Error::RsdpSignature { .. })));

    let mut bad_checksum = rsdp_v1(0x1000);
    bad_checksum[16] ^= 0x40;
    assert!(matches!(Rsdp::parse(&bad_checksum), Err(Error::RsdpChecksum { sum }) if sum != 0));

    let mut bad_extended = rsdp_v2(0x1000, 0x2000);
    bad_extended[24] ^= 1; // XSDT address byte: only the extended checksum covers it
    assert!(matches!(
        Rsdp::parse(&bad_extended),
        Err(Error::RsdpExtendedChecksum { .. })
    ));

    let mut bad_length = rsdp_v2(0x1000, 0x2000);
    bad_length[20..24].copy_from_slice(&0xFFFF_0000u32.to_le_bytes());
    checksum_fix(&mut bad_length, 32);
    assert_eq!(Rsdp::parse(&bad_length), Err(Error::RsdpLength { length: 0xFFFF_0000 }));

    // An ACPI 2.0 RSDP cut to the 20 bytes of a v1 copy.
    let v2 = rsdp_v2(0x1000, 0x2000);
    assert_eq!(Rsdp::parse(&v2[..20]), Err(Error::RsdpTooShort { len: 20, needed: 36 }));
    assert_eq!(Rsdp::parse(&v2[..7]), Err(Error::RsdpTooShort { len: 7, needed: 20 }));
}

#[test]
fn rsdp_found_in_bios_area_and_in_ebda() {
    let memory = firmware(qemu_madt(2), None);
    let rsdp = Rsdp::find_in_bios_areas(&memory).unwrap();
    assert_eq!(rsdp.phys, Some(RSDP_AT));
    assert_eq!(rsdp.xsdt_address, Some(XSDT_AT));

    let mut memory = firmware(qemu_madt(2), None);
    memory.poke(EBDA_AT + 0x40, &rsdp_v1(0xABCD_0000));
    let rsdp = Rsdp::find_in_bios_areas(&memory).unwrap();
    assert_eq!((rsdp.phys, rsdp.rsdt_address), (Some(EBDA_AT + 0x40), 0xABCD_0000));
}

#[test]
fn rsdp_scan_skips_corrupt_candidates_and_reports_absence() {
    let mut memory = firmware(qemu_madt(1), None);
    let mut corrupt = rsdp_v1(0x1111);
    corrupt[19] ^= 0xFF;
    memory.poke(0xE_0010, &corrupt);
    let rsdp = Rsdp::find_in_bios_areas(&memory).unwrap();
    assert_eq!(rsdp.phys, Some(RSDP_AT));

    // Signature not on a 16-byte boundary is not a candidate.
    let mut memory = firmware(qemu_madt(1), None);
    memory.poke(RSDP_AT, &[0u8; 36]);
    memory.poke(0xE_0008, &rsdp_v1(0x2222));
    assert_eq!(Rsdp::find_in_bios_areas(&memory), Err(Error::RsdpNotFound));

    // No low memory at all (UEFI-like): still an error, not a panic.
    assert_eq!(Rsdp::find_in_bios_areas(&FakePhys::new()), Err(Error::RsdpNotFound));
}

#[test]
fn rsdp_read_at_address_checks_memory_bounds() {
    let mut memory = FakePhys::new();
    memory.place(0x9000, rsdp_v2(0x1000, 0x2000)[..30].to_vec());
    assert!(matches!(Rsdp::read(&memory, 0x9000), Err(Error::PhysRead { .. })));
}

// ---- root tables -----------------------------------------------------------------------------

#[test]
fn xsdt_is_preferred_and_lists_every_table() {
    let memory = firmware(
        qemu_madt(4),
        Some(sdt(b"MCFG", 1, &mcfg_body(&[(0xB000_0000, 0, 0, 0xFF)]))),
    );
    let rsdp = Rsdp::find_in_bios_areas(&memory).unwrap();
    let tables = AcpiTables::new(&memory, &rsdp).unwrap();
    assert_eq!(tables.root_kind(), RootKind::Xsdt);
    assert_eq!(tables.entry_count(), 3);
    let signatures: Vec<TableSignature> = tables.tables().map(|table| table.unwrap().signature).collect();
    assert_eq!(
        signatures,
        [TableSignature(*b"FACP"), TableSignature::MADT, TableSignature::MCFG]
    );
    assert_eq!(tables.madt().unwrap().cpus.len(), 4);
    let mcfg = tables.mcfg().unwrap().unwrap();
    assert_eq!(mcfg.windows[0].base, 0xB000_0000);
}

#[test]
fn bad_xsdt_falls_back_to_rsdt_and_both_bad_reports_the_xsdt_error() {
    let mut memory = firmware(qemu_madt(2), None);
    memory.poke(XSDT_AT + 36, &[0xEE]);
    let rsdp = Rsdp::find_in_bios_areas(&memory).unwrap();
    let tables = AcpiTables::new(&memory, &rsdp).unwrap();
    assert_eq!(tables.root_kind(), RootKind::Rsdt);
    assert_eq!(tables.madt().unwrap().cpus.len(), 2);
    assert_eq!(tables.mcfg().unwrap(), None, "pc has no MCFG");

    memory.poke(RSDT_AT + 36, &[0xEE]);
    let error = AcpiTables::new(&memory, &rsdp).unwrap_err();
    assert!(
        matches!(
            error,
            Error::TableChecksum {
                signature: TableSignature::XSDT,
                phys: XSDT_AT,
                ..
            }
        ),
        "{error}"
    );
}

#[test]
fn root_table_with_partial_entry_is_rejected() {
    let mut memory = FakePhys::new();
    memory.place(0x5000, sdt(b"XSDT", 1, &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]));
    let rsdp = Rsdp {
        phys: None,
        revision: 2,
        oem_id: [0; 6],
        rsdt_address: 0,
        xsdt_address: Some(0x5000),
    };
    assert_eq!(
        AcpiTables::new(&memory, &rsdp).unwrap_err(),
        Error::RootTablePartialEntry {
            signature: TableSignature::XSDT,
            length: 48,
            entry_size: 8
        }
    );
    let none = Rsdp {
        xsdt_address: None,
        ..rsdp
    };
    assert_eq!(AcpiTables::new(&memory, &none).unwrap_err(), Error::RsdpNoRootTable);
}

#[test]
fn null_and_dangling_root_entries_do_not_hide_the_madt() {
    let mut memory = FakePhys::new();
    memory.place(0x5000, sdt(b"RSDT", 1, &rsdt_body(&[0, 0xDEAD_0000, 0x6000])));
    memory.place(0x6000, qemu_madt(3));
    let rsdp = Rsdp::parse(&rsdp_v1(0x5000)).unwrap();
    let tables = AcpiTables::new(&memory, &rsdp).unwrap();
    let listed: Vec<_> = tables.tables().collect();
    assert_eq!(listed.len(), 2, "the null entry is skipped");
    assert!(matches!(listed[0], Err(Error::PhysRead { phys: 0xDEAD_0000, .. })));
    assert_eq!(tables.madt().unwrap().cpus.len(), 3);
    assert_eq!(
        tables.find(TableSignature(*b"HPET")),
        Err(Error::TableNotFound {
            signature: TableSignature(*b"HPET")
        })
    );
}

#[test]
fn table_checksum_length_and_memory_bounds_are_enforced() {
    let mut madt = qemu_madt(2);
    madt[50] ^= 1;
    assert!(matches!(
        madt_from(madt),
        Err(Error::TableChecksum {
            signature: TableSignature::MADT,
            ..
        })
    ));

    let mut short = qemu_madt(2);
    short[4..8].copy_from_slice(&20u32.to_le_bytes());
    assert!(matches!(
        madt_from(short),
        Err(Error::TableLength {
            length: 20,
            min: 36,
            ..
        })
    ));

    // Length beyond the bytes that exist: the accessor refuses, nothing is read past the end.
    let mut long = qemu_madt(2);
    let real = long.len() as u32;
    long[4..8].copy_from_slice(&(real + 64).to_le_bytes());
    assert!(matches!(madt_from(long), Err(Error::PhysRead { .. })));

    let mut huge = qemu_madt(2);
    huge[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(matches!(
        madt_from(huge),
        Err(Error::TableLength { length: u32::MAX, .. })
    ));

    let memory = SliceMemory::new(0, &[0u8; 64]);
    let mcfg = sdt(b"MCFG", 1, &mcfg_body(&[]));
    let memory2 = SliceMemory::new(0, &mcfg);
    assert!(matches!(
        Sdt::load(&memory2, 0, Some(TableSignature::MADT), 36),
        Err(Error::TableSignatureMismatch {
            expected: TableSignature::MADT,
            found: TableSignature::MCFG,
            ..
        })
    ));
    assert!(Sdt::load(&memory, 0, None, 36).is_err());
}

#[test]
fn table_reads_are_bounded_by_the_validated_length() {
    let bytes = qemu_madt(1);
    let memory = SliceMemory::new(0, &bytes);
    let table = Sdt::load(&memory, 0, None, 36).unwrap();
    let mut out = [0u8; 8];
    assert!(table.read(&memory, table.length - 8, &mut out).is_ok());
    assert_eq!(
        table.read(&memory, table.length - 4, &mut out),
        Err(Error::TableOverrun {
            signature: TableSignature::MADT,
            offset: table.length - 4,
            len: 8,
            length: table.length
        })
    );
    assert!(table.read(&memory, u32::MAX, &mut out).is_err());
}

// ---- MADT ------------------------------------------------------------------------------------

#[test]
fn qemu_madt_parses_cpus_io_apic_overrides_and_nmi() {
    let madt = madt_from(qemu_madt(4)).unwrap();
    assert_eq!(madt.local_apic_address, 0xFEE0_0000);
    assert!(madt.pcat_compat);
    let ids: Vec<u32> = madt.usable_cpus().map(|cpu| cpu.apic_id).collect();
    assert_eq!(ids, [0, 1, 2, 3]);
    assert_eq!(madt.io_apics.len(), 1);
    assert_eq!((madt.io_apics[0].address, madt.io_apics[0].gsi_base), (0xFEC0_0000, 0));
    assert_eq!(madt.overrides.len(), 5);
    assert_eq!(madt.local_apic_nmis.len(), 1);
    assert_eq!(madt.local_apic_nmis[0].processor_uid, None);
    assert_eq!(madt.local_apic_nmis[0].lint, 1);

    let timer = madt.isa_irq_route(0);
    assert_eq!((timer.gsi, timer.level, timer.active_low), (2, false, false));
    let keyboard = madt.isa_irq_route(1);
    assert_eq!((keyboard.gsi, keyboard.level, keyboard.active_low), (1, false, false));
    let pci_11 = madt.pci_line_route(11);
    assert_eq!((pci_11.gsi, pci_11.level, pci_11.active_low), (11, true, false));
    let pci_3 = madt.pci_line_route(3);
    assert_eq!(
        (pci_3.gsi, pci_3.level, pci_3.active_low),
        (3, true, true),
        "PCI default: level, low"
    );
    assert_eq!(madt.overrides[1].polarity, Polarity::ActiveHigh);
    assert_eq!(madt.overrides[1].trigger, Trigger::Level);
}

#[test]
fn madt_x2apic_flags_duplicates_overrides_and_io_apic_lookup() {
    let entries = vec![
        lapic(0, 0, 1),
        lapic(1, 1, 0),    // disabled
        lapic(2, 2, 0b10), // online capable
        x2apic(2, 1, 7),   // duplicate of usable APIC id 2: skipped
        x2apic(300, 1, 300),
        ioapic(0, 0xFEC0_0000, 0),
        ioapic(1, 0xFEC0_1000, 24),
        nmi_source(0b1111, 23),
        x2apic_nmi(0b0101, u32::MAX, 1),
        x2apic_nmi(0, 300, 0),
        lapic_address_override(0x1_FEE0_0000),
        vec![0x80, 4, 0xAA, 0xBB], // OEM entry: skipped
    ];
    let madt = madt_from(sdt(b"APIC", 5, &madt_body(0xFEE0_0000, 0, &entries))).unwrap();
    assert_eq!(madt.local_apic_address, 0x1_FEE0_0000);
    assert!(!madt.pcat_compat);
    assert_eq!(madt.cpus.len(), 4);
    assert_eq!(madt.duplicate_apic_ids, 1);
    assert_eq!(madt.other_entries, 1);
    let usable: Vec<u32> = madt.usable_cpus().map(|cpu| cpu.apic_id).collect();
    assert_eq!(usable, [0, 2, 300]);
    assert!(madt.cpus[2].online_capable && !madt.cpus[2].enabled);
    assert!(madt.cpus[3].from_x2apic_entry && madt.cpus[3].processor_uid == 300);
    assert_eq!(madt.nmi_sources[0].gsi, 23);
    assert_eq!(
        (madt.nmi_sources[0].polarity, madt.nmi_sources[0].trigger),
        (Polarity::ActiveLow, Trigger::Level)
    );
    assert_eq!(madt.local_apic_nmis[0].processor_uid, None);
    assert_eq!(madt.local_apic_nmis[1].processor_uid, Some(300));
    let (io_apic, pin) = madt.io_apic_for_gsi(30).unwrap();
    assert_eq!((io_apic.id, pin), (1, 6));
    let (io_apic, pin) = madt.io_apic_for_gsi(23).unwrap();
    assert_eq!((io_apic.id, pin), (0, 23));
    let empty = madt_from(sdt(b"APIC", 5, &madt_body(0, 0, &[]))).unwrap();
    assert_eq!(empty.io_apic_for_gsi(0), Err(Error::NoIoApicForGsi { gsi: 0 }));
}

#[test]
fn madt_malformed_entries_give_errors_not_loops_or_overreads() {
    let with = |entries: Vec<Vec<u8>>| madt_from(sdt(b"APIC", 1, &madt_body(0xFEE0_0000, 1, &entries)));

    assert_eq!(
        with(vec![lapic(0, 0, 1), vec![0x80, 0]]).unwrap_err(),
        Error::MadtEntryTooShort {
            offset: 52,
            entry_type: 0x80,
            length: 0,
            min: 2
        }
    );
    assert_eq!(
        with(vec![vec![0x42, 1, 0, 0]]).unwrap_err(),
        Error::MadtEntryTooShort {
            offset: 44,
            entry_type: 0x42,
            length: 1,
            min: 2
        }
    );
    let mut short_lapic = lapic(0, 0, 1);
    short_lapic[1] = 6;
    short_lapic.truncate(6);
    assert_eq!(
        with(vec![short_lapic]).unwrap_err(),
        Error::MadtEntryTooShort {
            offset: 44,
            entry_type: 0,
            length: 6,
            min: 8
        }
    );
    let mut overrun = ioapic(0, 0, 0);
    overrun[1] = 40;
    assert_eq!(
        with(vec![overrun]).unwrap_err(),
        Error::MadtEntryOverrun {
            offset: 44,
            entry_type: 1,
            length: 40,
            table_length: 56
        }
    );
    assert!(matches!(
        with(vec![lapic(0, 0, 1), vec![0]]).unwrap_err(),
        Error::TableOverrun { offset: 52, .. }
    ));
    assert_eq!(
        with(vec![iso(1, 4, 4, 0)]).unwrap_err(),
        Error::MadtOverrideBus { bus: 1, irq: 4 }
    );
    assert!(matches!(
        madt_from(sdt(b"APIC", 1, &[0u8; 4])).unwrap_err(),
        Error::TableLength {
            length: 40,
            min: 44,
            ..
        }
    ));
}

/// A 2-socket EPYC lists 512 x2APIC entries, nine I/O APICs
/// and one LAPIC-NMI entry per CPU; a 4096-thread table parses too. Nothing
/// is capped, and the per-CPU NMI entries collapse to one.
#[test]
fn madt_at_server_scale_has_no_fixed_caps() {
    for cpus in [512u32, 4096] {
        let mut entries: Vec<Vec<u8>> = (0..cpus).map(|id| x2apic(id, 1, id)).collect();
        // Absent sockets: disabled placeholders, all with one id, cost nothing.
        entries.extend((0..300).map(|_| x2apic(0xFFFF_FFFF, 0, 0xFFFF_FFFE)));
        entries.extend((0..9u8).map(|id| ioapic(id, 0xFEC0_0000 + u32::from(id) * 0x1000, u32::from(id) * 24 + 24)));
        entries.extend((0..cpus).map(|uid| x2apic_nmi(0b0101, uid, 1)));
        let madt = madt_from(sdt(b"APIC", 5, &madt_body(0xFEE0_0000, 1, &entries))).unwrap();
        assert_eq!(madt.cpus.len() as u32, cpus + 300);
        assert_eq!(madt.usable_cpus().count() as u32, cpus);
        assert_eq!(madt.duplicate_apic_ids, 0, "disabled placeholders are not duplicates");
        assert_eq!(madt.usable_cpus().last().unwrap().apic_id, cpus - 1);
        assert_eq!(madt.io_apics.len(), 9);
        let (io_apic, pin) = madt.io_apic_for_gsi(8 * 24 + 24 + 5).unwrap();
        assert_eq!((io_apic.id, pin), (8, 5));
        assert_eq!(madt.local_apic_nmi_entries, cpus);
        assert_eq!(
            madt.local_apic_nmis,
            [platform::acpi::LocalApicNmi {
                processor_uid: None,
                lint: 1,
                polarity: Polarity::ActiveHigh,
                trigger: Trigger::Edge
            }]
        );
        assert_eq!(madt.nmi_pins_of(cpus - 1).count(), 1);
    }
}

#[test]
fn madt_nmi_entries_collapse_only_when_they_cover_every_cpu() {
    // Two CPUs, LINT1 named for only one of them: kept per CPU.
    let partial = vec![lapic(0, 0, 1), lapic(1, 1, 1), lapic_nmi(1, 0, 1), lapic_nmi(1, 0, 1)];
    let madt = madt_from(sdt(b"APIC", 1, &madt_body(0, 0, &partial))).unwrap();
    assert_eq!(madt.local_apic_nmi_entries, 2);
    assert_eq!(madt.local_apic_nmis.len(), 1, "the exact repeat is dropped");
    assert_eq!(madt.local_apic_nmis[0].processor_uid, Some(1));
    assert_eq!(madt.nmi_pins_of(0).count(), 0);
    assert_eq!(madt.nmi_pins_of(1).count(), 1);
    // Entries listed before the CPUs, with different flags per pin: one group each.
    let mixed = vec![
        lapic_nmi(0, 0, 1),
        lapic_nmi(1, 0, 1),
        lapic_nmi(1, 0b1111, 0),
        lapic(0, 0, 1),
        lapic(1, 1, 1),
        lapic(2, 9, 0), // disabled: need not be named
    ];
    let madt = madt_from(sdt(b"APIC", 1, &madt_body(0, 0, &mixed))).unwrap();
    let kept: Vec<(Option<u32>, u8)> = madt.local_apic_nmis.iter().map(|n| (n.processor_uid, n.lint)).collect();
    assert_eq!(kept, [(None, 1), (Some(1), 0)]);
}

#[test]
fn madt_disabled_entry_does_not_hide_a_later_usable_one() {
    let entries = vec![lapic(0, 0, 1), lapic(7, 5, 0), lapic(1, 5, 1), lapic(2, 5, 1)];
    let madt = madt_from(sdt(b"APIC", 1, &madt_body(0, 0, &entries))).unwrap();
    let usable: Vec<(u32, u32)> = madt.usable_cpus().map(|c| (c.apic_id, c.processor_uid)).collect();
    assert_eq!(usable, [(0, 0), (5, 1)]);
    assert_eq!(madt.duplicate_apic_ids, 1);
}

// ---- MCFG ------------------------------------------------------------------------------------

#[test]
fn mcfg_windows_parse_and_malformed_ones_are_rejected() {
    let mcfg = mcfg_from(sdt(
        b"MCFG",
        1,
        &mcfg_body(&[(0xB000_0000, 0, 0, 0xFF), (0xC000_0000, 1, 4, 7)]),
    ))
    .unwrap();
    assert_eq!(mcfg.windows.len(), 2);
    assert_eq!(mcfg.windows[0].region_len(), 256 << 20);
    assert_eq!(mcfg.windows[1].segment, 1);
    assert_eq!(mcfg.windows[1].region_base(), 0xC000_0000 + (4 << 20));
    assert_eq!(mcfg.windows[1].region_len(), 4 << 20);

    let mut partial = mcfg_body(&[(0xB000_0000, 0, 0, 0xFF)]);
    partial.extend_from_slice(&[1, 2, 3]);
    assert_eq!(
        mcfg_from(sdt(b"MCFG", 1, &partial)).unwrap_err(),
        Error::McfgPartialEntry { length: 36 + 8 + 19 }
    );

    let reversed = mcfg_body(&[(0xB000_0000, 0, 9, 3)]);
    assert_eq!(
        mcfg_from(sdt(b"MCFG", 1, &reversed)).unwrap_err(),
        Error::McfgBusRange {
            index: 0,
            start: 9,
            end: 3
        }
    );

    // A server lists a window per segment or root complex: more than the old cap of 8 parse.
    let many: Vec<_> = (0..24u16)
        .map(|segment| (0x30_0000_0000 + (u64::from(segment) << 28), segment, 0, 0xFF))
        .collect();
    let parsed = mcfg_from(sdt(b"MCFG", 1, &mcfg_body(&many))).unwrap();
    assert_eq!(parsed.windows.len(), 24);
    assert_eq!(parsed.windows[23].segment, 23);
    assert_eq!(parsed.windows[23].base, 0x30_0000_0000 + (23 << 28));
    let too_many: Vec<_> = (0..=platform::acpi::MAX_ECAM_WINDOWS as u16)
        .map(|segment| (0xB000_0000, segment, 0, 0))
        .collect();
    assert_eq!(
        mcfg_from(sdt(b"MCFG", 1, &mcfg_body(&too_many))).unwrap_err(),
        Error::McfgCapacity {
            capacity: platform::acpi::MAX_ECAM_WINDOWS
        }
    );

    assert!(matches!(
        mcfg_from(sdt(b"MCFG", 1, &[0; 4])).unwrap_err(),
        Error::TableLength { min: 44, .. }
    ));
}

#[test]
fn error_messages_name_the_offending_values() {
    let message = Error::MadtEntryOverrun {
        offset: 44,
        entry_type: 1,
        length: 40,
        table_length: 56,
    }
    .to_string();
    assert!(
        message.contains("type 1") && message.contains("offset 44") && message.contains("40") && message.contains("56")
    );
    let message = Error::TableChecksum {
        signature: TableSignature(*b"AP\x01C"),
        phys: 0x1000,
        sum: 3,
    }
    .to_string();
    assert!(message.contains("AP\\x01C") && message.contains("0x1000"), "{message}");
}

/// An ECAM base near 2^64 (buses 1-2): were it accepted, `region_base()`
/// would wrap to 0 and ECAM would be mapped at physical 0. It is refused at parse time, and the window arithmetic is
/// checked for hand-made windows too.
#[test]
fn mcfg_base_near_2_pow_64_is_refused() {
    let near_top = mcfg_body(&[(0xFFFF_FFFF_FFF0_0000, 0, 1, 2)]);
    let error = mcfg_from(sdt(b"MCFG", 1, &near_top)).unwrap_err();
    assert_eq!(
        error,
        Error::McfgWindowAddress {
            index: 0,
            base: 0xFFFF_FFFF_FFF0_0000,
            bus_start: 1,
            bus_end: 2
        }
    );
    assert!(error.to_string().contains("0xfffffffffff00000"), "{error}");
    let window = EcamWindow {
        base: 0xFFFF_FFFF_FFF0_0000,
        segment: 0,
        bus_start: 1,
        bus_end: 2,
    };
    assert!(window.region().is_err());
    // Above the 52-bit physical address space, even without wrapping.
    let high = mcfg_body(&[(1 << 52, 0, 0, 0)]);
    assert!(matches!(
        mcfg_from(sdt(b"MCFG", 1, &high)).unwrap_err(),
        Error::McfgWindowAddress { .. }
    ));
    // A window ending exactly at the 52-bit limit is fine.
    let last = mcfg_body(&[((1 << 52) - (2 << 20), 0, 0, 1)]);
    let mcfg = mcfg_from(sdt(b"MCFG", 1, &last)).unwrap();
    assert_eq!(mcfg.windows[0].region(), Ok(((1 << 52) - (2 << 20))..(1 << 52)));
}

/// A Multiboot2 loader on UEFI may give only the EFI system
/// table (tag 12); the RSDP is its configuration table's ACPI entry.
#[test]
fn rsdp_from_the_efi_system_table_prefers_the_acpi_20_entry() {
    const ACPI_20: [u8; 16] = [
        0x71, 0xe8, 0x68, 0x88, 0xf1, 0xe4, 0xd3, 0x11, 0xbc, 0x22, 0x00, 0x80, 0xc7, 0x3c, 0x88, 0x81,
    ];
    const ACPI_10: [u8; 16] = [
        0x30, 0x2d, 0x9d, 0xeb, 0x88, 0x2d, 0xd3, 0x11, 0x9a, 0x16, 0x00, 0x90, 0x27, 0x3f, 0xc1, 0x4d,
    ];
    let system_table = |count: u64| {
        let mut st = b"IBI SYST".to_vec();
        st.resize(104, 0);
        st.extend_from_slice(&count.to_le_bytes());
        st.extend_from_slice(&0x3000u64.to_le_bytes());
        st
    };
    let config = |entries: &[([u8; 16], u64)]| {
        let mut bytes = Vec::new();
        for (guid, address) in entries {
            bytes.extend_from_slice(guid);
            bytes.extend_from_slice(&address.to_le_bytes());
        }
        bytes
    };
    let other = [7u8; 16];
    let mut memory = FakePhys::new();
    memory.place(0x1000, system_table(3));
    memory.place(0x3000, config(&[(other, 0), (ACPI_10, 0x5000), (ACPI_20, 0x6000)]));
    memory.place(0x5000, rsdp_v1(0x1111_0000));
    memory.place(0x6000, rsdp_v2(0x2222_0000, 0x3333_0000));
    let rsdp = Rsdp::from_efi_system_table(&memory, 0x1000).unwrap();
    assert_eq!((rsdp.phys, rsdp.xsdt_address), (Some(0x6000), Some(0x3333_0000)));

    // Only the ACPI 1.0 entry: used.
    memory.poke(0x3000 + 48, &[0; 16]);
    assert_eq!(Rsdp::from_efi_system_table(&memory, 0x1000).unwrap().phys, Some(0x5000));
    // Neither: a clear error, as for a wrong signature or an absurd entry count.
    memory.poke(0x3000 + 24, &[0; 16]);
    let error = Rsdp::from_efi_system_table(&memory, 0x1000).unwrap_err();
    assert_eq!(
        error,
        Error::EfiSystemTable {
            phys: 0x1000,
            reason: "no ACPI entry in its configuration table"
        }
    );
    assert!(error.to_string().contains("EFI system table at 0x1000"), "{error}");
    let mut memory = FakePhys::new();
    memory.place(0x1000, system_table(1 << 40));
    assert!(matches!(
        Rsdp::from_efi_system_table(&memory, 0x1000),
        Err(Error::EfiSystemTable { .. })
    ));
    memory.poke(0x1000, b"NOT SYST");
    assert!(matches!(
        Rsdp::from_efi_system_table(&memory, 0x1000),
        Err(Error::EfiSystemTable { reason, .. }) if reason.contains("signature")
    ));
}
