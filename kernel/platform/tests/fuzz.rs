//! Property tests: random firmware tables and random configuration spaces
//! never panic, never loop, never read out of bounds; parsers agree with
//! simple models.

mod common;

use std::collections::BTreeSet;

use common::*;
use platform::acpi::{AcpiTables, Madt, Mcfg, Rsdp, Sdt, SliceMemory};
use platform::irq::{AffinityPolicy, VectorAllocator};
use platform::pci::{PciListing, ScanMode, enumerate};
use proptest::prelude::*;

fn raw_entry() -> impl Strategy<Value = Vec<u8>> {
    (0u8..12, 0u8..24, proptest::collection::vec(any::<u8>(), 0..22)).prop_map(|(entry_type, length, mut body)| {
        let mut entry = vec![entry_type, length];
        entry.append(&mut body);
        entry
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn madt_walk_never_panics_on_random_entries(entries in proptest::collection::vec(raw_entry(), 0..40), flags in any::<u32>()) {
        let bytes = sdt(b"APIC", 1, &madt_body(0xFEE0_0000, flags, &entries));
        let memory = SliceMemory::new(0x1000, &bytes);
        let table = Sdt::load(&memory, 0x1000, None, 36).unwrap();
        if let Ok(madt) = Madt::parse(&memory, &table) {
            // Whatever was accepted is internally consistent.
            let ids: BTreeSet<u32> = madt.usable_cpus().map(|cpu| cpu.apic_id).collect();
            prop_assert_eq!(ids.len(), madt.usable_cpus().count());
            for io_apic in &madt.io_apics {
                prop_assert_eq!(madt.io_apic_for_gsi(io_apic.gsi_base).unwrap().1, 0);
            }
        }
    }

    #[test]
    fn well_formed_madt_entries_always_parse(cpus in proptest::collection::btree_set(any::<u8>(), 1..60), x2 in proptest::collection::btree_set(256u32..100_000, 0..20)) {
        let mut entries: Vec<Vec<u8>> = cpus.iter().map(|&id| lapic(id, id, 1)).collect();
        entries.extend(x2.iter().map(|&id| x2apic(id, 1, id)));
        entries.push(ioapic(0, 0xFEC0_0000, 0));
        let bytes = sdt(b"APIC", 3, &madt_body(0xFEE0_0000, 1, &entries));
        let memory = SliceMemory::new(0, &bytes);
        let madt = Madt::parse(&memory, &Sdt::load(&memory, 0, None, 36).unwrap()).unwrap();
        let parsed: Vec<u32> = madt.cpus.iter().map(|cpu| cpu.apic_id).collect();
        let expected: Vec<u32> = cpus.iter().map(|&id| u32::from(id)).chain(x2.iter().copied()).collect();
        prop_assert_eq!(parsed, expected);
    }

    #[test]
    fn mcfg_and_root_tables_never_panic_on_random_bodies(body in proptest::collection::vec(any::<u8>(), 0..200)) {
        for signature in [b"MCFG", b"XSDT", b"RSDT"] {
            let bytes = sdt(signature, 1, &body);
            let memory = SliceMemory::new(0x2000, &bytes);
            let table = Sdt::load(&memory, 0x2000, None, 36).unwrap();
            if signature == b"MCFG" {
                if let Ok(mcfg) = Mcfg::parse(&memory, &table) {
                    prop_assert_eq!(mcfg.windows.len(), (body.len() - 8) / 16);
                }
            } else if let Ok(tables) = AcpiTables::from_root(&memory, 0x2000, if signature == b"XSDT" { platform::acpi::RootKind::Xsdt } else { platform::acpi::RootKind::Rsdt }) {
                let _ = tables.madt();
                let _ = tables.mcfg();
                prop_assert_eq!(tables.tables().count() <= tables.entry_count(), true);
            }
        }
    }

    #[test]
    fn corrupted_firmware_images_give_errors_not_panics(edits in proptest::collection::vec((0usize..4, 0usize..300, any::<u8>()), 1..12), fix_checksums in any::<bool>()) {
        let mut memory = firmware(qemu_madt(4), Some(sdt(b"MCFG", 1, &mcfg_body(&[(0xB000_0000, 0, 0, 0xFF)]))));
        let bases = [RSDT_AT, XSDT_AT, MADT_AT, MCFG_AT];
        for &(table, offset, value) in &edits {
            let base = bases[table];
            let region = memory.regions.iter_mut().find(|(start, _)| *start == base).unwrap();
            let len = region.1.len();
            region.1[offset % len] = value;
            if fix_checksums {
                checksum_fix(&mut region.1, 9);
            }
        }
        let rsdp = Rsdp::find_in_bios_areas(&memory).unwrap();
        if let Ok(tables) = AcpiTables::new(&memory, &rsdp) {
            for table in tables.tables() {
                let _ = table;
            }
            let _ = tables.madt();
            let _ = tables.mcfg();
        }
    }

    #[test]
    fn random_configuration_space_enumerates_without_panicking(
        functions in proptest::collection::vec((0u8..4, 0u8..32, 0u8..8, proptest::array::uniform32(any::<u32>()), proptest::array::uniform32(any::<u32>()), proptest::array::uniform8(any::<u32>())), 1..12),
        all_buses in any::<bool>(),
    ) {
        let config = FakeConfig::new();
        for (bus, device, function, low, high, writable) in functions {
            let mut fake = FakeFunction::endpoint(0, 0, 0, 0);
            fake.regs[..32].copy_from_slice(&low);
            fake.regs[32..].copy_from_slice(&high);
            fake.writable = [0; 64];
            fake.writable[1] = 0x7FF;
            fake.writable[4..10].copy_from_slice(&writable[..6]);
            config.add(bus, device, function, fake);
        }
        let mode = if all_buses { ScanMode::AllBuses } else { ScanMode::FollowBridges };
        let listed = enumerate(&config, 0, 0..=3, mode).unwrap();
        prop_assert!(listed.len() <= config.functions.borrow().len());
        for function in &listed {
            for capability in &function.capabilities {
                prop_assert!((0x40..=0xFC).contains(&capability.offset) && capability.offset % 4 == 0);
            }
            if let Some(msi) = function.msi {
                prop_assert!(usize::from(msi.offset) + usize::from(msi.size_bytes()) <= 256);
            }
            for bar in function.bars.iter().filter_map(|slot| slot.bar()) {
                prop_assert!(bar.size.is_power_of_two());
            }
        }
        let _ = PciListing(&listed).to_string();
    }

    #[test]
    fn affinity_display_round_trips(pairs in proptest::collection::btree_map(0u16..2048, any::<u32>(), 1..64), cpu in any::<u32>(), form in 0u8..3) {
        let policy = match form {
            0 => AffinityPolicy::Spread,
            1 => AffinityPolicy::SingleCpu(cpu),
            _ => AffinityPolicy::Explicit(pairs.into_iter().collect()),
        };
        prop_assert_eq!(AffinityPolicy::parse(&policy.to_string()), Ok(policy));
    }

    #[test]
    fn affinity_parser_never_panics(text in "[a-z0-9:,+ -]{0,40}") {
        if let Ok(policy) = AffinityPolicy::parse(&text) {
            prop_assert_eq!(AffinityPolicy::parse(&policy.to_string()), Ok(policy));
        }
    }

    #[test]
    fn vector_allocator_matches_a_set_model(operations in proptest::collection::vec((0u8..3, 0x28u8..0xF8), 1..300)) {
        let allocator = VectorAllocator::new();
        let mut model = BTreeSet::new();
        for (operation, vector) in operations {
            match operation {
                0 => match allocator.allocate() {
                    Ok(got) => {
                        let expected = (0x30..=0xEFu8).find(|candidate| !model.contains(candidate));
                        prop_assert_eq!(Some(got), expected);
                        model.insert(got);
                    }
                    Err(_) => prop_assert_eq!(model.len(), 192),
                },
                1 => {
                    let result = allocator.free(vector);
                    prop_assert_eq!(result.is_ok(), model.remove(&vector));
                }
                _ => {
                    let result = allocator.reserve(vector);
                    let allowed = (0x30..=0xEF).contains(&vector) && !model.contains(&vector);
                    prop_assert_eq!(result.is_ok(), allowed);
                    if allowed {
                        model.insert(vector);
                    }
                }
            }
        }
        prop_assert_eq!(allocator.free_count(), 192 - model.len());
    }
}
