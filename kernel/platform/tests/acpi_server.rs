//! Server-firmware tables on fixtures: SRAT, SLIT and the NUMA topology,
//! HPET, the FADT's PM timer, DMAR and IVRS; well-formed and malformed.

mod common;

use common::*;
use platform::acpi::{
    AcpiTables, Dmar, Fadt, Hpet, Ivrs, NumaTopology, Rsdp, Sdt, SliceMemory, Slit, Srat, cpu_index_order,
    hpet_counter_bits, hpet_counter_hz, vtd,
};
use platform::{Error, TableSignature};

fn load<T>(bytes: &[u8], parse: impl Fn(&SliceMemory, &Sdt) -> platform::Result<T>) -> platform::Result<T> {
    let memory = SliceMemory::new(0x4000, bytes);
    let table = Sdt::load(&memory, 0x4000, None, 36)?;
    parse(&memory, &table)
}

fn srat_cpu(domain: u32, apic_id: u8, enabled: bool) -> Vec<u8> {
    let mut e = vec![0, 16, domain as u8, apic_id];
    e.extend_from_slice(&u32::from(enabled).to_le_bytes());
    e.push(0);
    e.extend_from_slice(&domain.to_le_bytes()[1..4]);
    e.extend_from_slice(&[0; 4]);
    e
}

fn srat_x2apic(domain: u32, apic_id: u32, enabled: bool) -> Vec<u8> {
    let mut e = vec![2, 24, 0, 0];
    e.extend_from_slice(&domain.to_le_bytes());
    e.extend_from_slice(&apic_id.to_le_bytes());
    e.extend_from_slice(&u32::from(enabled).to_le_bytes());
    e.extend_from_slice(&[0; 8]);
    e
}

fn srat_memory(domain: u32, base: u64, length: u64, flags: u32) -> Vec<u8> {
    let mut e = vec![1, 40];
    e.extend_from_slice(&domain.to_le_bytes());
    e.extend_from_slice(&[0; 2]);
    e.extend_from_slice(&base.to_le_bytes());
    e.extend_from_slice(&length.to_le_bytes());
    e.extend_from_slice(&[0; 4]);
    e.extend_from_slice(&flags.to_le_bytes());
    e.extend_from_slice(&[0; 8]);
    e
}

fn srat(revision: u8, entries: &[Vec<u8>]) -> Vec<u8> {
    let mut body = vec![1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    for e in entries {
        body.extend_from_slice(e);
    }
    sdt(b"SRAT", revision, &body)
}

fn slit(matrix: &[&[u8]]) -> Vec<u8> {
    let mut body = (matrix.len() as u64).to_le_bytes().to_vec();
    for row in matrix {
        body.extend_from_slice(row);
    }
    sdt(b"SLIT", 1, &body)
}

const GIB: u64 = 1 << 30;

#[test]
fn two_node_srat_and_slit_give_nodes_lookups_and_report_lines() {
    let entries = vec![
        srat_cpu(0, 0, true),
        srat_cpu(0, 1, true),
        srat_x2apic(1, 2, true),
        srat_x2apic(1, 3, true),
        srat_x2apic(7, 9, false), // disabled: no node 2 from it
        srat_memory(0, 0, 0xA_0000, 1),
        srat_memory(0, 0x10_0000, GIB - 0x10_0000, 1),
        srat_memory(1, GIB, GIB, 1),
        srat_memory(5, 4 * GIB, GIB, 0), // disabled
    ];
    let srat = load(&srat(3, &entries), |m, t| Srat::parse(m, t)).unwrap();
    assert_eq!((srat.cpus.len(), srat.memory.len(), srat.other_entries), (5, 4, 0));
    let slit = load(&slit(&[&[10, 21], &[21, 10]]), |m, t| Slit::parse(m, t)).unwrap();
    assert!(slit.is_consistent());
    let numa = NumaTopology::new(&srat, Some(slit));
    assert_eq!(numa.nodes.len(), 2);
    assert_eq!(numa.node_of_apic_id(3), Some(1));
    assert_eq!(numa.node_of_apic_id(9), None);
    assert_eq!(numa.node_of_address(0x9_FFFF), Some(0));
    assert_eq!(numa.node_of_address(0xA_0000), None, "the hole below 1 MiB");
    assert_eq!(numa.node_of_address(GIB + 5), Some(1));
    assert_eq!(numa.node_of_address(4 * GIB), None);
    assert_eq!((numa.distance(0, 1), numa.distance(1, 1)), (Some(21), Some(10)));
    assert_eq!(numa.distances_from(1), Some(vec![21, 10]));
    assert_eq!(numa.distances_from(2), None);
    // Kernel numbering with the boot CPU at APIC id 2: 2, 0, 1, 3.
    let order = cpu_index_order([0, 1, 2, 3], 2);
    assert_eq!(order, [2, 0, 1, 3]);
    assert_eq!(numa.node_of_cpu(0, &order), Some(1));
    assert_eq!(
        numa.describe(&numa.nodes[0], &order).to_string(),
        "node 0: cpus 1-2, memory 0x0-0xa0000 0x100000-0x40000000 (1023 MiB)"
    );
    assert_eq!(
        numa.describe(&numa.nodes[1], &order).to_string(),
        "node 1: cpus 0,3, memory 0x40000000-0x80000000 (1024 MiB)"
    );
}

#[test]
fn srat_revision_1_reads_only_the_low_byte_of_proximity_domains() {
    let entries = vec![srat_cpu(0x0102, 0, true), srat_memory(0x0102, 0, GIB, 1)];
    let old = load(&srat(1, &entries), |m, t| Srat::parse(m, t)).unwrap();
    assert_eq!((old.cpus[0].proximity_domain, old.memory[0].proximity_domain), (2, 2));
    let new = load(&srat(2, &entries), |m, t| Srat::parse(m, t)).unwrap();
    assert_eq!(
        (new.cpus[0].proximity_domain, new.memory[0].proximity_domain),
        (0x0102, 0x0102)
    );
}

#[test]
fn inconsistent_slit_is_kept_out_and_oversized_one_is_an_error() {
    let bad = load(&slit(&[&[10, 5], &[21, 10]]), |m, t| Slit::parse(m, t)).unwrap();
    assert!(!bad.is_consistent());
    let srat = load(&srat(2, &[srat_cpu(0, 0, true)]), |m, t| Srat::parse(m, t)).unwrap();
    assert!(!NumaTopology::new(&srat, Some(bad)).has_distances());
    let mut body = 3u64.to_le_bytes().to_vec();
    body.extend_from_slice(&[10; 8]); // 9 needed
    assert_eq!(
        load(&sdt(b"SLIT", 1, &body), |m, t| Slit::parse(m, t)).unwrap_err(),
        Error::SlitSize {
            localities: 3,
            length: 52
        }
    );
    let mut huge = u64::MAX.to_le_bytes().to_vec();
    huge.push(10);
    assert!(matches!(
        load(&sdt(b"SLIT", 1, &huge), |m, t| Slit::parse(m, t)),
        Err(Error::SlitSize { .. })
    ));
}

#[test]
fn malformed_srat_entries_give_errors_naming_them() {
    let mut short = srat_memory(0, 0, GIB, 1);
    short[1] = 24;
    short.truncate(24);
    assert_eq!(
        load(&srat(2, &[short]), |m, t| Srat::parse(m, t)).unwrap_err(),
        Error::AcpiEntryTooShort {
            signature: TableSignature::SRAT,
            offset: 48,
            entry_type: 1,
            length: 24,
            min: 40
        }
    );
    let mut overrun = srat_cpu(0, 0, true);
    overrun[1] = 200;
    assert!(matches!(
        load(&srat(2, &[overrun]), |m, t| Srat::parse(m, t)).unwrap_err(),
        Error::AcpiEntryOverrun {
            offset: 48,
            length: 200,
            ..
        }
    ));
    // A zero length must not loop.
    assert!(matches!(
        load(&srat(2, &[vec![0x42, 0]]), |m, t| Srat::parse(m, t)).unwrap_err(),
        Error::AcpiEntryTooShort { length: 0, min: 2, .. }
    ));
    let message = load(&srat(2, &[vec![0x42, 0]]), |m, t| Srat::parse(m, t))
        .unwrap_err()
        .to_string();
    assert!(message.contains("SRAT entry type 0x42 at offset 48"), "{message}");
}

fn hpet_table(space: u8, address: u64) -> Vec<u8> {
    let mut body = 0x8086_A701u32.to_le_bytes().to_vec();
    body.extend_from_slice(&[space, 64, 0, 0]);
    body.extend_from_slice(&address.to_le_bytes());
    body.push(0);
    body.extend_from_slice(&0x80u16.to_le_bytes());
    body.push(0);
    sdt(b"HPET", 1, &body)
}

#[test]
fn hpet_table_and_capabilities() {
    let hpet = load(&hpet_table(0, 0xFED0_0000), |m, t| Hpet::parse(m, t)).unwrap();
    assert_eq!(
        (hpet.base, hpet.vendor_id(), hpet.minimum_tick),
        (0xFED0_0000, 0x8086, 0x80)
    );
    assert_eq!(
        load(&hpet_table(1, 0x400), |m, t| Hpet::parse(m, t)).unwrap_err(),
        Error::HpetAddress {
            space: "I/O",
            address: 0x400
        }
    );
    assert!(load(&hpet_table(0, 0), |m, t| Hpet::parse(m, t)).is_err());
    // QEMU's HPET: 10 ns period (100 MHz), 64-bit counter.
    let qemu_caps = (10_000_000u64 << 32) | (1 << 13) | 0x8086_0001;
    assert_eq!(hpet_counter_hz(qemu_caps), Ok(100_000_000));
    assert_eq!(hpet_counter_bits(qemu_caps), 64);
    // Intel's 14.31818 MHz: 69841279 fs.
    assert_eq!(hpet_counter_hz(69_841_279u64 << 32), Ok(14_318_179));
    assert_eq!(hpet_counter_bits(69_841_279u64 << 32), 32);
    assert_eq!(hpet_counter_hz(0), Err(Error::HpetPeriod { period_fs: 0 }));
    assert_eq!(
        hpet_counter_hz(u64::MAX),
        Err(Error::HpetPeriod { period_fs: u32::MAX }),
        "a block that reads all-ones is not an HPET"
    );
}

/// A FADT of `len` bytes with the PM timer fields set.
fn fadt(len: usize, legacy: u32, legacy_len: u8, flags: u32, extended: Option<(u8, u64)>) -> Vec<u8> {
    let mut body = vec![0u8; len - 36];
    body[76 - 36..80 - 36].copy_from_slice(&legacy.to_le_bytes());
    body[91 - 36] = legacy_len;
    body[112 - 36..116 - 36].copy_from_slice(&flags.to_le_bytes());
    if let Some((space, address)) = extended {
        body[208 - 36] = space;
        body[212 - 36..220 - 36].copy_from_slice(&address.to_le_bytes());
    }
    sdt(b"FACP", 6, &body)
}

#[test]
fn fadt_pm_timer_from_extended_or_legacy_block() {
    let parse = |bytes: Vec<u8>| load(&bytes, |m, t| Fadt::parse(m, t)).unwrap().pm_timer;
    // QEMU q35: legacy 0x608, 24-bit, extended also set.
    let pm = parse(fadt(244, 0x608, 4, 0, Some((1, 0x608)))).unwrap();
    assert_eq!((pm.port, pm.bits, pm.from_extended), (0x608, 24, true));
    let pm = parse(fadt(244, 0xB008, 4, 1 << 8, None)).unwrap();
    assert_eq!((pm.port, pm.bits, pm.from_extended), (0xB008, 32, false));
    // An ACPI 1.0 FADT (116 bytes) has no extended block.
    assert_eq!(parse(fadt(116, 0x808, 4, 0, None)).unwrap().port, 0x808);
    assert_eq!(parse(fadt(244, 0, 0, 0, None)), Err("PM_TMR_BLK is 0"));
    assert_eq!(parse(fadt(244, 0x808, 2, 0, None)), Err("PM_TMR_LEN is not 4"));
    assert_eq!(
        parse(fadt(244, 0x808, 4, 0, Some((0, 0xFED0_0000)))),
        Err("X_PM_TMR_BLK is not in I/O space")
    );
    assert_eq!(
        parse(fadt(244, 0x808, 4, 1 << 20, None)),
        Err("hardware-reduced ACPI has no PM timer")
    );
    assert!(matches!(
        load(&sdt(b"FACP", 1, &[0; 40]), |m, t| Fadt::parse(m, t)),
        Err(Error::TableLength { min: 116, .. })
    ));
}

fn drhd(flags: u8, segment: u16, base: u64, scope: &[u8]) -> Vec<u8> {
    let mut s = vec![0, 0];
    s.extend_from_slice(&((16 + scope.len()) as u16).to_le_bytes());
    s.extend_from_slice(&[flags, 0]);
    s.extend_from_slice(&segment.to_le_bytes());
    s.extend_from_slice(&base.to_le_bytes());
    s.extend_from_slice(scope);
    s
}

fn dmar(flags: u8, structures: &[Vec<u8>]) -> Vec<u8> {
    let mut body = vec![38, flags];
    body.extend_from_slice(&[0; 10]);
    for s in structures {
        body.extend_from_slice(s);
    }
    sdt(b"DMAR", 1, &body)
}

#[test]
fn dmar_units_regions_and_flags() {
    let mut rmrr = vec![1, 0, 24, 0, 0, 0, 0, 0];
    rmrr.extend_from_slice(&0x7B80_0000u64.to_le_bytes());
    rmrr.extend_from_slice(&0x7BFF_FFFFu64.to_le_bytes());
    let structures = vec![
        drhd(0, 0, 0xFED9_0000, &[1, 8, 0, 0, 0, 0, 2, 0]),
        drhd(1, 0, 0xFED9_1000, &[]),
        rmrr,
        vec![3, 0, 20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0], // RHSA
    ];
    let parsed = load(&dmar(0b011, &structures), |m, t| Dmar::parse(m, t)).unwrap();
    assert_eq!(parsed.host_address_width, 39);
    assert!(parsed.interrupt_remapping && parsed.x2apic_opt_out && !parsed.dma_control_opt_in);
    assert_eq!(parsed.units.len(), 2);
    assert_eq!(
        (parsed.units[0].register_base, parsed.units[0].scope_bytes),
        (0xFED9_0000, 8)
    );
    assert!(parsed.units[1].include_pci_all);
    assert_eq!(parsed.reserved_regions[0].limit, 0x7BFF_FFFF);
    assert_eq!(parsed.other_structures, 1);
    let mut bad = drhd(0, 0, 0xFED9_0000, &[]);
    bad[2] = 8;
    bad.truncate(8);
    assert!(matches!(
        load(&dmar(0, &[bad]), |m, t| Dmar::parse(m, t)),
        Err(Error::AcpiEntryTooShort {
            entry_type: 0,
            length: 8,
            min: 16,
            ..
        })
    ));
}

#[test]
fn vtd_disable_commands_keep_other_enables_and_drop_one_shot_bits() {
    let gsts = vtd::TRANSLATION | vtd::INTERRUPT_REMAPPING | vtd::QUEUED_INVALIDATION | (1 << 30) | (1 << 24);
    let names: Vec<&str> = vtd::enabled_names(gsts).collect();
    assert_eq!(names, ["DMA translation", "interrupt remapping", "queued invalidation"]);
    let command = vtd::command_without(gsts, vtd::TRANSLATION);
    assert_eq!(command, vtd::INTERRUPT_REMAPPING | vtd::QUEUED_INVALIDATION);
    assert_eq!(
        vtd::command_without(command, vtd::INTERRUPT_REMAPPING),
        vtd::QUEUED_INVALIDATION
    );
    assert_eq!(vtd::enabled_names(vtd::COMPATIBILITY_FORMAT).count(), 0);
}

#[test]
fn vtd_invalidation_queue_layout_and_wait_descriptor() {
    // 128-bit descriptors, one page, tail at entry 3.
    assert_eq!(vtd::queue_layout(0x7F00_0000, 0x30), (0x7F00_0000, 4096, 0x30, 16));
    // 256-bit descriptors (bit 11), 2^2 pages; bits outside 18:4 of IQT are ignored.
    assert_eq!(
        vtd::queue_layout(0x1_2345_6000 | (1 << 11) | 2, 0xFFF8_0040 | 0xF),
        (0x1_2345_6000, 16384, 0x40, 32)
    );
    let [low, high] = vtd::wait_descriptor(0x9000_0003, 1);
    assert_eq!(low & 0xF, 5, "type: invalidation wait");
    assert_eq!(low & (1 << 5), 1 << 5, "status write");
    assert_eq!(low >> 32, 1, "status data");
    assert_eq!(high, 0x9000_0000, "a dword-aligned status address");
}

#[test]
fn ivrs_merges_one_iommu_described_by_two_block_types() {
    let mut body = vec![0x43, 0x30, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    for (block, len) in [(0x10u8, 24u16), (0x11, 40), (0x10, 24)] {
        let mut b = vec![block, 0];
        b.extend_from_slice(&len.to_le_bytes());
        b.extend_from_slice(&0x0002u16.to_le_bytes());
        b.extend_from_slice(&0x40u16.to_le_bytes());
        let base: u64 = if len == 24 && body.len() > 50 {
            0xF720_0000
        } else {
            0xF710_0000
        };
        b.extend_from_slice(&base.to_le_bytes());
        b.resize(usize::from(len), 0);
        body.extend_from_slice(&b);
    }
    body.extend_from_slice(&[0x20, 0, 32, 0]);
    body.resize(body.len() + 28, 0);
    let ivrs = load(&sdt(b"IVRS", 2, &body), |m, t| Ivrs::parse(m, t)).unwrap();
    assert_eq!(ivrs.units.len(), 2);
    assert_eq!(ivrs.units[0].block_types, [0x10, 0x11]);
    assert_eq!((ivrs.units[1].base, ivrs.memory_definitions), (0xF720_0000, 1));
    let mut short = vec![0u8; 12];
    short.extend_from_slice(&[0x11, 0, 24, 0]);
    short.resize(short.len() + 20, 0);
    assert!(matches!(
        load(&sdt(b"IVRS", 2, &short), |m, t| Ivrs::parse(m, t)),
        Err(Error::AcpiEntryTooShort {
            entry_type: 0x11,
            min: 40,
            ..
        })
    ));
}

#[test]
fn optional_tables_are_none_when_absent_and_errors_when_broken() {
    let memory = firmware(qemu_madt(2), None);
    let rsdp = Rsdp::find_in_bios_areas(&memory).unwrap();
    let tables = AcpiTables::new(&memory, &rsdp).unwrap();
    assert_eq!(tables.srat(), Ok(None));
    assert_eq!(tables.numa(), Ok(None));
    assert_eq!(tables.dmar(), Ok(None));
    assert_eq!(tables.ivrs(), Ok(None));
    assert_eq!(tables.hpet(), Ok(None));
    // The fixture's FACP is all zeros: no PM timer, and why.
    assert_eq!(tables.fadt().unwrap().unwrap().pm_timer, Err("PM_TMR_BLK is 0"));
}

#[test]
fn the_qemu_scenario_dmar_opts_out_of_x2apic() {
    // Loaded by tests/acpi.scenarios (acpi-dmar-x2apic-opt-out*) through `-acpitable file=`:
    // QEMU's own DMAR never sets the opt-out flag.
    let bytes = include_bytes!("../../../tests/data/dmar-x2apic-opt-out.bin");
    let parsed = load(bytes, |m, t| Dmar::parse(m, t)).unwrap();
    assert!(parsed.x2apic_opt_out && parsed.interrupt_remapping);
    assert_eq!(parsed.host_address_width, 39);
    assert!(parsed.units.is_empty() && parsed.reserved_regions.is_empty());
}
