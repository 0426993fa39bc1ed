//! Firmware-derived arithmetic at its extremes: every table parser, the AML
//! discovery and the PCI code given lengths of 0 and all ones, counts that
//! overflow, addresses near 2^64 and reversed ranges. Each case ends with a
//! parsed value or a named `platform::Error`; a debug build (overflow checks
//! on) turns any unchecked step into a panic, which fails the test.

mod common;

use common::*;
use platform::Error;
use platform::acpi::{PhysMemory, Rsdp};
use platform::aml::{self, FixedRegions, Path};
use platform::pci::{PciAddress, ResourceWindows, plan_resources};

// ---- sites that misbehaved on one specific input ----------------------------------------------

/// A physical memory that answers every address outside `image` with a
/// valid revision-2 RSDP repeated every 64 bytes from [`RSDP_ORIGIN`] (as a
/// machine that decodes the whole address space might), so a reader is
/// never stopped by a failed read.
struct AnswersEverywhere {
    base: u64,
    image: Vec<u8>,
}

/// Where the repeated RSDPs start: 9 bytes below 2^64.
const RSDP_ORIGIN: u64 = u64::MAX - 8;

impl PhysMemory for AnswersEverywhere {
    fn read_bytes(&self, phys: u64, out: &mut [u8]) -> platform::Result<()> {
        if let Some(start) = phys.checked_sub(self.base)
            && let Ok(start) = usize::try_from(start)
            && let Some(bytes) = start.checked_add(out.len()).and_then(|end| self.image.get(start..end))
        {
            out.copy_from_slice(bytes);
            return Ok(());
        }
        let rsdp = rsdp_v2(0x1000, 0x2000);
        for (i, byte) in out.iter_mut().enumerate() {
            let at = phys.wrapping_add(i as u64).wrapping_sub(RSDP_ORIGIN) % 64;
            *byte = rsdp.get(at as usize).copied().unwrap_or(0);
        }
        Ok(())
    }
}

/// A 64-bit EFI system table at `at` with one configuration entry: the ACPI
/// 2.0 GUID and `rsdp`.
fn efi_system_table(at: u64, rsdp: u64) -> Vec<u8> {
    let mut table = vec![0u8; 0x100];
    table[..8].copy_from_slice(b"IBI SYST");
    table[104..112].copy_from_slice(&1u64.to_le_bytes());
    table[112..120].copy_from_slice(&(at + 0x80).to_le_bytes());
    let guid = [
        0x71, 0xe8, 0x68, 0x88, 0xf1, 0xe4, 0xd3, 0x11, 0xbc, 0x22, 0x00, 0x80, 0xc7, 0x3c, 0x88, 0x81,
    ];
    table[0x80..0x90].copy_from_slice(&guid);
    table[0x90..0x98].copy_from_slice(&rsdp.to_le_bytes());
    table
}

#[test]
fn an_efi_rsdp_pointer_near_the_top_of_the_address_space_is_a_read_error() {
    let memory = AnswersEverywhere {
        base: 0x1000,
        image: efi_system_table(0x1000, RSDP_ORIGIN),
    };
    assert_eq!(
        Rsdp::from_efi_system_table(&memory, 0x1000),
        Err(Error::PhysRead {
            phys: RSDP_ORIGIN,
            len: 36
        })
    );
    // The same RSDP lower down is read.
    let lower = RSDP_ORIGIN - 64 * 1000;
    let memory = AnswersEverywhere {
        base: 0x1000,
        image: efi_system_table(0x1000, lower),
    };
    assert_eq!(
        Rsdp::from_efi_system_table(&memory, 0x1000).map(|rsdp| rsdp.phys),
        Ok(Some(lower))
    );
}

#[test]
fn an_efi_system_table_whose_fields_pass_2_to_the_64_is_refused() {
    let at = u64::MAX - 50;
    let memory = AnswersEverywhere {
        base: at,
        image: efi_system_table(0, 0)[..51].to_vec(),
    };
    assert!(matches!(
        Rsdp::from_efi_system_table(&memory, at),
        Err(Error::EfiSystemTable { .. })
    ));
}

#[test]
fn a_pci_config_region_access_near_2_to_the_64_is_refused() {
    use platform::aml::config_access;
    use platform::pci::ConfigSpace;
    let config = FakeConfig::new();
    config.add(0, 1, 0, FakeFunction::endpoint(0x8086, 0x1234, 1, 0));
    let space = ConfigSpace::new(&config, PciAddress::new(0, 0, 1, 0));
    for offset in [u64::MAX, u64::MAX - 1, u64::MAX - 3, u64::MAX - 7, 1 << 63] {
        for width in [1, 2, 4, 8] {
            let error = config_access(&space, offset, width, None).expect_err("refused");
            assert!(
                matches!(error, Error::Aml { what: "access past the 4 KiB configuration space", value, .. } if value == u64::from(width)),
                "{offset:#x}/{width}: {error}"
            );
            assert!(config_access(&space, offset, width, Some(1)).is_err());
        }
    }
    assert!(config_access(&space, 0, 4, None).is_ok());
}

#[test]
fn swizzling_across_a_device_number_above_252_does_not_overflow() {
    let found = discovered(&host_bridge_aml(&[], &prt(&[(0x0003_FFFF, 0, 17)])));
    assert_eq!(found.bridges.len(), 1, "{:?}", found.problems);
    // Device 3 behind a bridge-less hop at 02.0: the pin swizzles by the
    // device number. Path entries are the caller's; one naming device 255
    // (no such device) swizzles as (pin + 255) % 4.
    for device in [0u8, 31, 252, 253, 254, 255] {
        for pin in 1..=4u8 {
            let route = found.route_for(0, 0, &[(3, 0), (device, 0)], pin);
            let pin0 = (u16::from(pin) - 1 + u16::from(device)) % 4;
            assert_eq!(route.is_some(), pin0 == 0, "device {device} pin {pin}");
        }
    }
}

#[test]
fn a_prefetchable_window_reaching_the_last_byte_of_the_address_space_saturates() {
    const BRIDGE_PREFETCH: u16 = 0x24;
    let config = FakeConfig::new();
    config.add(0, 0, 0, FakeFunction::endpoint(0x8086, 0x29C0, 0x06, 0x00));
    config.add(0, 1, 0, FakeFunction::bridge(0x1B36, 0x000C, 0, 1, 1));
    let bridge = PciAddress::new(0, 0, 1, 0);
    // 64-bit prefetchable base 0x10_0000, limit 0xFFFF_FFFF_FFFF_FFFF.
    config.set_reg(bridge, BRIDGE_PREFETCH, 0xFFF1_0011);
    config.set_reg(bridge, BRIDGE_PREFETCH + 4, 0);
    config.set_reg(bridge, BRIDGE_PREFETCH + 8, u32::MAX);
    let windows = ResourceWindows {
        memory: 0xC000_0000..0xFEC0_0000,
        io: Some(0xC000..0x1_0000),
        buses: 0..=255,
    };
    let plan = plan_resources(&config, 0, &windows).expect("a plan");
    assert!(plan.refused.is_empty(), "{:?}", plan.refused);
}

// ---- AML values that do not fit the field they fill ---------------------------------------------

/// PkgLength for `contents` (the encoded length counts its own bytes).
fn pkg(contents: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let len = contents.len();
    if len < 0x3F {
        out.push((len + 1) as u8);
    } else if len + 2 <= 0xFFF {
        let total = len + 2;
        out.extend_from_slice(&[0x40 | (total & 0xF) as u8, (total >> 4) as u8]);
    } else {
        let total = len + 3;
        out.extend_from_slice(&[0x80 | (total & 0xF) as u8, (total >> 4) as u8, (total >> 12) as u8]);
    }
    out.extend_from_slice(contents);
    out
}

fn qword(value: u64) -> Vec<u8> {
    let mut out = vec![0x0E];
    out.extend_from_slice(&value.to_le_bytes());
    out
}

fn name(seg: &[u8; 4], value: Vec<u8>) -> Vec<u8> {
    let mut out = vec![0x08];
    out.extend_from_slice(seg);
    out.extend(value);
    out
}

fn package(items: &[Vec<u8>]) -> Vec<u8> {
    let mut contents = vec![items.len() as u8];
    for item in items {
        contents.extend_from_slice(item);
    }
    let mut out = vec![0x12];
    out.extend(pkg(&contents));
    out
}

/// `Name (_PRT, Package { Package { address, pin, 0, gsi }, ... })`.
fn prt(entries: &[(u64, u64, u64)]) -> Vec<u8> {
    let items: Vec<Vec<u8>> = entries
        .iter()
        .map(|&(address, pin, gsi)| package(&[qword(address), qword(pin), vec![0x00], qword(gsi)]))
        .collect();
    name(b"_PRT", package(&items))
}

/// `Scope (\_SB) { Device (PCI0) { Name (_HID, EisaId ("PNP0A08")) ... } }`.
fn host_bridge_aml(names: &[(&[u8; 4], u64)], extra: &[u8]) -> Vec<u8> {
    let mut body = b"PCI0".to_vec();
    body.extend(name(b"_HID", vec![0x0C, 0x41, 0xD0, 0x0A, 0x08]));
    for (seg, value) in names {
        body.extend(name(seg, qword(*value)));
    }
    body.extend_from_slice(extra);
    let mut device = vec![0x5B, 0x82];
    device.extend(pkg(&body));
    let mut scope = b"_SB_".to_vec();
    scope.extend(device);
    let mut out = vec![0x10];
    out.extend(pkg(&scope));
    out
}

fn discovered(aml_bytes: &[u8]) -> aml::Discovery {
    let mut regions = FixedRegions::default();
    let mut interp = aml::load(&mut regions, &[(2, aml_bytes.to_vec())]);
    assert!(interp.load_problems.is_empty(), "{:?}", interp.load_problems);
    aml::discover(&mut interp)
}

fn problem_paths(found: &aml::Discovery) -> Vec<Path> {
    found.problems.iter().map(|p| p.path.clone()).collect()
}

fn paths(texts: &[&str]) -> Vec<Path> {
    texts
        .iter()
        .map(|text| Path::parse(text).expect("valid path"))
        .collect::<Vec<_>>()
}

#[test]
fn host_bridge_values_that_do_not_fit_are_problems_not_truncated() {
    let found = discovered(&host_bridge_aml(
        &[(b"_SEG", 0x1_0001), (b"_BBN", 0x180), (b"_PXM", 0x1_0000_0002)],
        &[],
    ));
    let bridge = &found.bridges[0];
    assert_eq!((bridge.segment, bridge.bbn, bridge.pxm), (0, None, None));
    assert_eq!(
        problem_paths(&found),
        paths(&["\\_SB.PCI0._SEG", "\\_SB.PCI0._BBN", "\\_SB.PCI0._PXM"])
    );
    for problem in &found.problems {
        assert!(matches!(problem.error, Error::Aml { .. }), "{}", problem.error);
    }
    // In range, they are read as they are.
    let found = discovered(&host_bridge_aml(
        &[(b"_SEG", 0xFFFF), (b"_BBN", 0xFF), (b"_PXM", 0xFFFF_FFFF)],
        &[],
    ));
    let bridge = &found.bridges[0];
    assert_eq!(
        (bridge.segment, bridge.bbn, bridge.pxm),
        (0xFFFF, Some(0xFF), Some(0xFFFF_FFFF))
    );
    assert!(found.problems.is_empty());
}

#[test]
fn prt_entries_whose_values_do_not_fit_are_unresolved_and_reported() {
    let found = discovered(&host_bridge_aml(
        &[],
        &prt(&[
            // GSI above 32 bits.
            (0x0001_FFFF, 0, 0x1_0000_0010),
            // Pin 5 (INTA..INTD are 0..=3).
            (0x0002_FFFF, 5, 16),
            // Device 0x20 (device numbers end at 31).
            (0x0020_FFFF, 0, 18),
            // In range.
            (0x0003_FFFF, 3, 17),
        ]),
    ));
    let table = &found.prts[0];
    assert_eq!(table.unresolved, 3);
    assert_eq!(table.routes.len(), 1);
    assert_eq!(
        (table.routes[0].device, table.routes[0].pin, table.routes[0].gsi),
        (3, 3, 17)
    );
    assert_eq!(problem_paths(&found), paths(&["\\_SB.PCI0._PRT"; 3]));
}

// ---- fixed sites: inputs a caller or a later step can hand in ---------------------------------

#[test]
fn a_table_whose_header_sits_near_2_to_the_64_is_a_read_error() {
    use platform::TableSignature;
    use platform::acpi::{Sdt, SliceMemory};
    let bytes = sdt(b"APIC", 1, &madt_body(0xFEE0_0000, 1, &[lapic(0, 0, 1)]));
    let memory = SliceMemory::new(0x1000, &bytes);
    // A hand-made header (its fields are public) whose table would end past 2^64.
    let table = Sdt {
        phys: u64::MAX - 8,
        signature: TableSignature::MADT,
        length: 0x100,
        revision: 1,
        oem_id: [0; 6],
        oem_table_id: [0; 8],
    };
    let mut out = [0u8; 4];
    assert_eq!(
        table.read(&memory, 0x40, &mut out),
        Err(Error::PhysRead {
            phys: u64::MAX - 8,
            len: 4
        })
    );
    assert!(platform::acpi::Madt::parse(&memory, &table).is_err());
}

#[test]
fn a_slit_whose_locality_count_is_changed_after_parsing_is_not_consistent() {
    use platform::acpi::{Sdt, SliceMemory, Slit};
    let mut body = 2u64.to_le_bytes().to_vec();
    body.extend_from_slice(&[10, 20, 20, 10]);
    let bytes = sdt(b"SLIT", 1, &body);
    let memory = SliceMemory::new(0x1000, &bytes);
    let mut slit = Slit::parse(&memory, &Sdt::load(&memory, 0x1000, None, 36).unwrap()).unwrap();
    assert!(slit.is_consistent());
    slit.localities = usize::MAX;
    assert!(!slit.is_consistent());
    assert_eq!(slit.distance(u32::MAX, 0), None);
}

#[test]
fn a_window_of_length_0_ends_at_its_start() {
    use platform::aml::{Window, WindowKind};
    let window = Window {
        kind: WindowKind::Memory,
        start: 0x1000,
        len: 0,
        translation: 0,
        producer: true,
    };
    assert_eq!(window.end(), 0x1000);
}

#[test]
fn an_eisa_id_wider_than_32_bits_matches_no_id() {
    assert_eq!(aml::eisa_id_text(0x080A_D041), "PNP0A08");
    // Its low 32 bits are PNP0A08's; the value is not an EISA id.
    assert_eq!(aml::eisa_id_text(0x1_080A_D041), "0x1080ad041");
}

#[test]
fn a_node_range_that_ends_before_it_starts_counts_no_memory() {
    use platform::acpi::NumaNode;
    let node = NumaNode {
        node: 0,
        proximity_domain: 0,
        apic_ids: Vec::new(),
        #[allow(clippy::reversed_empty_ranges)]
        memory: vec![0x2000..0x1000, 0..u64::MAX, 0..u64::MAX],
    };
    assert_eq!(node.memory_bytes(), u64::MAX);
}

#[test]
fn an_msix_structure_in_a_bar_near_2_to_the_64_is_refused() {
    use platform::pci::{Bar, BarKind, BarSlot, MsixCapability};
    let mut bars = [BarSlot::Unused; 6];
    bars[0] = BarSlot::Bar(Bar {
        slot: 0,
        kind: BarKind::Memory64,
        address: u64::MAX - 0xFFF,
        size: 0x4000,
        prefetchable: false,
    });
    let msix = MsixCapability {
        offset: 0x50,
        table_size: 4,
        table_bir: 0,
        table_offset: 0x2000,
        pba_bir: 0,
        pba_offset: 0x3000,
    };
    let function = PciAddress::new(0, 0, 3, 0);
    assert!(matches!(
        msix.table_region(function, &bars),
        Err(Error::BarAddress { slot: 0, .. })
    ));
    assert!(matches!(
        msix.pba_region(function, &bars),
        Err(Error::BarAddress { slot: 0, .. })
    ));
}

#[test]
fn the_largest_srat_and_ivrs_tables_parse() {
    use platform::acpi::{Ivrs, NumaTopology, Sdt, SliceMemory, Srat};
    // 1 MiB of x2APIC affinity entries, all in one domain, and of IVHD blocks, all distinct.
    let mut srat_body = vec![1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    let cpus = (platform::acpi::MAX_TABLE_LEN as usize - 48) / 24;
    for id in 0..cpus as u32 {
        let mut entry = vec![2, 24, 0, 0];
        entry.extend_from_slice(&7u32.to_le_bytes());
        entry.extend_from_slice(&id.to_le_bytes());
        entry.extend_from_slice(&1u32.to_le_bytes());
        entry.extend_from_slice(&[0; 8]);
        srat_body.extend(entry);
    }
    let bytes = sdt(b"SRAT", 3, &srat_body);
    let memory = SliceMemory::new(0x1000, &bytes);
    let srat = Srat::parse(&memory, &Sdt::load(&memory, 0x1000, None, 36).unwrap()).unwrap();
    let numa = NumaTopology::new(&srat, None);
    assert_eq!(numa.nodes.len(), 1);
    assert_eq!(numa.nodes[0].apic_ids.len(), cpus);

    let mut ivrs_body = vec![0u8; 12];
    let units = (platform::acpi::MAX_TABLE_LEN as usize - 48) / 24;
    for unit in 0..units as u64 {
        let mut block = vec![0x10, 0, 24, 0];
        block.extend_from_slice(&[0; 4]);
        block.extend_from_slice(&(0xFED8_0000 + (unit << 14)).to_le_bytes());
        block.extend_from_slice(&[0; 8]);
        ivrs_body.extend(block);
    }
    let bytes = sdt(b"IVRS", 2, &ivrs_body);
    let memory = SliceMemory::new(0x1000, &bytes);
    let ivrs = Ivrs::parse(&memory, &Sdt::load(&memory, 0x1000, None, 36).unwrap()).unwrap();
    assert_eq!(ivrs.units.len(), units);
}

#[test]
fn entries_of_length_0_or_1_are_refused_not_walked_forever() {
    use platform::acpi::{Dmar, Ivrs, Madt, Sdt, SliceMemory, Srat};
    for length in [0u8, 1] {
        let bytes = sdt(b"APIC", 1, &madt_body(0xFEE0_0000, 1, &[vec![0, length]]));
        let memory = SliceMemory::new(0x1000, &bytes);
        let table = Sdt::load(&memory, 0x1000, None, 36).unwrap();
        assert!(matches!(
            Madt::parse(&memory, &table),
            Err(Error::MadtEntryTooShort { offset: 44, .. })
        ));

        let mut body = vec![1u8; 12];
        body.extend_from_slice(&[0x7F, length]);
        let bytes = sdt(b"SRAT", 3, &body);
        let memory = SliceMemory::new(0x1000, &bytes);
        let table = Sdt::load(&memory, 0x1000, None, 36).unwrap();
        assert!(matches!(
            Srat::parse(&memory, &table),
            Err(Error::AcpiEntryTooShort { offset: 48, .. })
        ));

        let mut body = vec![0u8; 12];
        body.extend_from_slice(&[0x7F, 0, length, 0]);
        let bytes = sdt(b"DMAR", 1, &body);
        let memory = SliceMemory::new(0x1000, &bytes);
        let table = Sdt::load(&memory, 0x1000, None, 36).unwrap();
        assert!(matches!(
            Dmar::parse(&memory, &table),
            Err(Error::AcpiEntryTooShort { offset: 48, .. })
        ));

        let mut body = vec![0u8; 12];
        body.extend_from_slice(&[0x7F, 0, length, 0]);
        let bytes = sdt(b"IVRS", 2, &body);
        let memory = SliceMemory::new(0x1000, &bytes);
        let table = Sdt::load(&memory, 0x1000, None, 36).unwrap();
        assert!(matches!(
            Ivrs::parse(&memory, &table),
            Err(Error::AcpiEntryTooShort { offset: 48, .. })
        ));
    }
}

// ---- every parser with extreme values ----------------------------------------------------------

mod extremes {
    use super::*;
    use platform::TableSignature;
    use platform::acpi::{
        AcpiTables, Dmar, Fadt, Hpet, Ivrs, Madt, Mcfg, NumaTopology, PHYS_ADDRESS_LIMIT, RootKind, Sdt, SliceMemory,
        Slit, Spcr, Srat, cpu_index_order,
    };
    use proptest::prelude::*;

    /// 0, 1, all ones, a little below all ones, a power of two, the 52-bit
    /// physical limit and just below it, or anything.
    fn edge64() -> impl Strategy<Value = u64> {
        prop_oneof![
            Just(0u64),
            Just(1),
            Just(u64::MAX),
            (1u64..64).prop_map(|k| u64::MAX - k),
            (0u32..64).prop_map(|shift| 1u64 << shift),
            Just(PHYS_ADDRESS_LIMIT),
            (1u64..=256).prop_map(|buses| PHYS_ADDRESS_LIMIT - (buses << 20)),
            any::<u64>(),
        ]
    }

    fn edge32() -> impl Strategy<Value = u32> {
        prop_oneof![
            Just(0u32),
            Just(1),
            Just(u32::MAX),
            (1u32..64).prop_map(|k| u32::MAX - k),
            (0u32..32).prop_map(|shift| 1u32 << shift),
            any::<u32>(),
        ]
    }

    fn edge16() -> impl Strategy<Value = u16> {
        prop_oneof![
            Just(0u16),
            Just(1),
            Just(u16::MAX),
            Just(0xFF),
            Just(0x100),
            any::<u16>()
        ]
    }

    fn edge8() -> impl Strategy<Value = u8> {
        prop_oneof![Just(0u8), Just(1), Just(0x7F), Just(0x80), Just(u8::MAX), any::<u8>()]
    }

    /// An entry length: 0, 1, the header's, one short of the type's minimum,
    /// the minimum, the largest its field holds, or anything up to that.
    fn entry_len(header: u64, min: u64, max: u64) -> impl Strategy<Value = u64> {
        prop_oneof![
            Just(0u64),
            Just(1),
            Just(header),
            Just(min.saturating_sub(1)),
            Just(min),
            Just(max),
            0..=max,
        ]
    }

    /// The declared length of a table: the true one, 0, below the header,
    /// the header only, one byte past the buffer, the accepted maximum and
    /// one past it, all ones, or anything.
    fn declared_length() -> impl Strategy<Value = Option<u32>> {
        prop_oneof![
            6 => Just(None),
            1 => Just(Some(0)),
            1 => Just(Some(35)),
            1 => Just(Some(36)),
            1 => Just(Some(u32::MAX)),
            1 => Just(Some(platform::acpi::MAX_TABLE_LEN)),
            1 => Just(Some(platform::acpi::MAX_TABLE_LEN + 1)),
            1 => any::<u32>().prop_map(Some),
        ]
    }

    /// A table around `body`: the declared length (`None`: the true one,
    /// `Some(n)`: `n`, or the true one plus one when `n` is 1), and a
    /// checksum made right or left as it falls.
    fn table(signature: &[u8; 4], revision: u8, body: &[u8], length: Option<u32>, fix_checksum: bool) -> Vec<u8> {
        let mut bytes = sdt(signature, revision, body);
        if let Some(length) = length {
            let length = if length == 1 { bytes.len() as u32 + 1 } else { length };
            bytes[4..8].copy_from_slice(&length.to_le_bytes());
        }
        if fix_checksum {
            checksum_fix(&mut bytes, 9);
        }
        bytes
    }

    /// Parses `bytes` at `base` as `signature` twice: after `Sdt::load` (which
    /// checks the length and checksum), and through a header that trusts the
    /// declared length, so that each parser's own checks are exercised too.
    /// Either a value or a named error; the error's text is built (printing
    /// must not panic either).
    fn parse_both_ways(signature: &[u8; 4], base: u64, bytes: &[u8]) -> Result<(), TestCaseError> {
        let memory = SliceMemory::new(base, bytes);
        if let Ok(table) = Sdt::load(&memory, base, None, 36) {
            prop_assert!(u64::from(table.length) <= bytes.len() as u64);
            parse(signature, &memory, &table)?;
        }
        let declared = bytes
            .get(4..8)
            .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
        let trusted = Sdt {
            phys: base,
            signature: TableSignature(*signature),
            length: declared,
            revision: bytes.get(8).copied().unwrap_or(0),
            oem_id: [0; 6],
            oem_table_id: [0; 8],
        };
        parse(signature, &memory, &trusted)
    }

    fn parse(signature: &[u8; 4], memory: &SliceMemory<'_>, table: &Sdt) -> Result<(), TestCaseError> {
        let outcome: platform::Result<()> = match signature {
            b"APIC" => Madt::parse(memory, table).map(|madt| {
                for io_apic in &madt.io_apics {
                    let _ = madt.io_apic_for_gsi(io_apic.gsi_base);
                }
                for irq in [0u8, 9, 255] {
                    let _ = (madt.isa_irq_route(irq), madt.pci_line_route(irq));
                }
            }),
            b"MCFG" => Mcfg::parse(memory, table).and_then(|mcfg| {
                for window in &mcfg.windows {
                    let region = window.region()?;
                    assert!(region.start <= region.end && region.end <= PHYS_ADDRESS_LIMIT);
                    assert!(window.bus_start <= window.bus_end);
                }
                Ok(())
            }),
            b"SRAT" => Srat::parse(memory, table).map(|srat| {
                let numa = NumaTopology::new(&srat, None);
                let ids: Vec<u32> = srat.cpus.iter().map(|cpu| cpu.apic_id).collect();
                let order = cpu_index_order(ids.iter().copied(), ids.first().copied().unwrap_or(0));
                for node in &numa.nodes {
                    let _ = format!("{}", numa.describe(node, &order));
                    let _ = node.memory_bytes();
                    for range in &node.memory {
                        assert!(range.start <= range.end);
                        let _ = numa.range_is_on_node(range.start, u64::MAX, node.node);
                    }
                    let _ = numa.distances_from(node.node);
                }
                let _ = numa.node_of_address(u64::MAX);
            }),
            b"SLIT" => Slit::parse(memory, table).map(|slit| {
                let _ = slit.is_consistent();
                let _ = slit.distance(u32::MAX, u32::MAX);
            }),
            b"HPET" => Hpet::parse(memory, table).map(|hpet| assert_ne!(hpet.base, 0)),
            b"FACP" => Fadt::parse(memory, table).map(|fadt| {
                if let Ok(timer) = fadt.pm_timer {
                    assert!(timer.bits == 24 || timer.bits == 32);
                }
            }),
            b"DMAR" => Dmar::parse(memory, table).map(|_| ()),
            b"IVRS" => Ivrs::parse(memory, table).map(|_| ()),
            b"SPCR" => Spcr::parse(memory, table).map(|_| ()),
            b"XSDT" | b"RSDT" => {
                let kind = if signature == b"XSDT" {
                    RootKind::Xsdt
                } else {
                    RootKind::Rsdt
                };
                AcpiTables::from_root(memory, table.phys, kind).map(|tables| {
                    assert!(tables.tables().count() <= tables.entry_count());
                    let _ = (
                        tables.madt(),
                        tables.mcfg(),
                        tables.srat(),
                        tables.slit(),
                        tables.hpet(),
                    );
                    let _ = (
                        tables.fadt(),
                        tables.dmar(),
                        tables.ivrs(),
                        tables.spcr(),
                        tables.numa(),
                    );
                    let _ = tables.definition_blocks();
                })
            }
            _ => Ok(()),
        };
        if let Err(error) = outcome {
            let text = error.to_string();
            prop_assert!(!text.is_empty());
        }
        Ok(())
    }

    /// A sub-table entry: `type`, a length field from [`entry_len`] and a
    /// body of extreme little-endian fields (cut or padded to the declared
    /// length, or left short of it).
    fn entry(
        types: Vec<u16>,
        header: u64,
        min: u64,
        max: u64,
        encode: fn(u16, u64, &[u8]) -> Vec<u8>,
    ) -> impl Strategy<Value = Vec<u8>> {
        (
            prop::sample::select(types),
            entry_len(header, min, max),
            proptest::collection::vec(edge64(), 0..6),
            any::<bool>(),
        )
            .prop_map(move |(kind, length, fields, pad)| {
                let mut body: Vec<u8> = fields.iter().flat_map(|v| v.to_le_bytes()).collect();
                let body_len = length.saturating_sub(header) as usize;
                if pad {
                    body.resize(body_len, 0xFF);
                }
                encode(kind, length, &body)
            })
    }

    fn byte_type(kind: u16, length: u64, body: &[u8]) -> Vec<u8> {
        let mut out = vec![kind as u8, length as u8];
        out.extend_from_slice(body);
        out
    }

    fn word_type(kind: u16, length: u64, body: &[u8]) -> Vec<u8> {
        let mut out = kind.to_le_bytes().to_vec();
        out.extend_from_slice(&(length as u16).to_le_bytes());
        out.extend_from_slice(body);
        out
    }

    fn byte_type_word_length(kind: u16, length: u64, body: &[u8]) -> Vec<u8> {
        let mut out = vec![kind as u8, 0];
        out.extend_from_slice(&(length as u16).to_le_bytes());
        out.extend_from_slice(body);
        out
    }

    fn madt_entry() -> impl Strategy<Value = Vec<u8>> {
        entry(vec![0, 1, 2, 3, 4, 5, 9, 10, 0x7F, 0xFF], 2, 16, 255, byte_type)
    }

    fn srat_entry() -> impl Strategy<Value = Vec<u8>> {
        entry(vec![0, 1, 2, 3, 5, 0xFF], 2, 40, 255, byte_type)
    }

    fn dmar_entry() -> impl Strategy<Value = Vec<u8>> {
        entry(vec![0, 1, 2, 3, 4, 0xFFFF], 4, 24, 0xFFFF, word_type)
    }

    fn ivrs_entry() -> impl Strategy<Value = Vec<u8>> {
        entry(
            vec![0x10, 0x11, 0x40, 0x20, 0x21, 0x22, 0xF0],
            4,
            40,
            0xFFFF,
            byte_type_word_length,
        )
    }

    /// An MCFG entry: base, segment, start and end bus (start above end
    /// sometimes, all 256 buses sometimes).
    fn mcfg_entry() -> impl Strategy<Value = Vec<u8>> {
        (edge64(), edge16(), edge8(), edge8()).prop_map(|(base, segment, start, end)| {
            let mut out = base.to_le_bytes().to_vec();
            out.extend_from_slice(&segment.to_le_bytes());
            out.extend_from_slice(&[start, end, 0, 0, 0, 0]);
            out
        })
    }

    /// Where the table is placed: low, or ending exactly at 2^64.
    fn base(len: usize, high: bool) -> u64 {
        if high { 0u64.wrapping_sub(len as u64) } else { 0x1000 }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

        /// RSDP copies: any length up to 40 bytes, the signature right or
        /// not, any revision, the length field 0, 36 or anything, and each
        /// checksum right or not.
        #[test]
        fn rsdp_with_extreme_fields(
            cut in 0usize..=40,
            signature in any::<bool>(),
            revision in edge8(),
            length in prop_oneof![Just(0u32), Just(36), Just(u32::MAX), any::<u32>()],
            addresses in (edge32(), edge64()),
            fix in (any::<bool>(), any::<bool>()),
        ) {
            let mut bytes = rsdp_v2(addresses.0, addresses.1);
            if !signature {
                bytes[0] = b'X';
            }
            bytes[15] = revision;
            bytes[20..24].copy_from_slice(&length.to_le_bytes());
            if fix.0 {
                checksum_fix(&mut bytes[..20], 8);
            }
            if fix.1 {
                checksum_fix(&mut bytes, 32);
            }
            bytes.resize(40, 0);
            bytes.truncate(cut);
            match Rsdp::parse(&bytes) {
                Ok(rsdp) => {
                    prop_assert!(bytes.starts_with(b"RSD PTR "));
                    if rsdp.revision >= 2 {
                        prop_assert_eq!(length, 36);
                        prop_assert!(rsdp.xsdt_address.is_some());
                    }
                }
                Err(error) => {
                    let text = error.to_string();
                    prop_assert!(!text.is_empty());
                }
            }
            for at in [0x1000u64, 0u64.wrapping_sub(bytes.len() as u64)] {
                let memory = SliceMemory::new(at, &bytes);
                let _ = Rsdp::read(&memory, at);
                let _ = Rsdp::from_efi_system_table(&memory, at);
            }
        }

        /// Root tables (RSDT, XSDT) with extreme declared lengths and
        /// entries (0, near 2^64, at the tables), checksums right or not.
        #[test]
        fn root_tables_with_extreme_lengths_and_entries(
            entries in proptest::collection::vec(edge64(), 0..8),
            length in declared_length(),
            fix in any::<bool>(),
            high in any::<bool>(),
        ) {
            for signature in [b"XSDT", b"RSDT"] {
                let body: Vec<u8> = if signature == b"XSDT" {
                    entries.iter().flat_map(|e| e.to_le_bytes()).collect()
                } else {
                    entries.iter().flat_map(|&e| (e as u32).to_le_bytes()).collect()
                };
                let bytes = table(signature, 1, &body, length, fix);
                parse_both_ways(signature, base(bytes.len(), high), &bytes)?;
            }
        }

        /// MADT entries of every type with lengths 0, 1, 2, short, exact,
        /// 255 and anything, fields at their extremes, the table's declared
        /// length and checksum extreme too.
        #[test]
        fn madt_with_extreme_entries(
            entries in proptest::collection::vec(madt_entry(), 0..12),
            local_apic in edge32(),
            length in declared_length(),
            fix in any::<bool>(),
            high in any::<bool>(),
        ) {
            let bytes = table(b"APIC", 3, &madt_body(local_apic, 1, &entries), length, fix);
            parse_both_ways(b"APIC", base(bytes.len(), high), &bytes)?;
        }

        /// MCFG with bases near 2^64 and the 52-bit limit, start bus above
        /// end bus, every bus, a partial trailing entry sometimes.
        #[test]
        fn mcfg_with_extreme_windows(
            entries in proptest::collection::vec(mcfg_entry(), 0..8),
            partial in 0usize..16,
            length in declared_length(),
            fix in any::<bool>(),
            high in any::<bool>(),
        ) {
            let mut body = vec![0u8; 8];
            body.extend(entries.concat());
            body.extend(std::iter::repeat_n(0xFF, partial));
            let bytes = table(b"MCFG", 1, &body, length, fix);
            parse_both_ways(b"MCFG", base(bytes.len(), high), &bytes)?;
        }

        /// SRAT affinity entries with lengths 0, 1, 2, short, exact, 255,
        /// base + length past 2^64, domains of all ones; then the NUMA layout.
        #[test]
        fn srat_with_extreme_entries(
            entries in proptest::collection::vec(srat_entry(), 0..12),
            revision in prop_oneof![Just(1u8), Just(3u8)],
            length in declared_length(),
            fix in any::<bool>(),
        ) {
            let mut body = vec![1u8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
            body.extend(entries.concat());
            let bytes = table(b"SRAT", revision, &body, length, fix);
            parse_both_ways(b"SRAT", 0x1000, &bytes)?;
        }

        /// SLIT locality counts 0, 1, whose square overflows 64 bits, or
        /// that do not fit the matrix that follows.
        #[test]
        fn slit_with_extreme_locality_counts(
            localities in prop_oneof![Just(0u64), Just(1), Just(2), Just(1 << 32), Just(u64::MAX), Just(0x1_0000_0001), edge64()],
            cells in proptest::collection::vec(prop_oneof![Just(10u8), Just(20), any::<u8>()], 0..20),
            length in declared_length(),
            fix in any::<bool>(),
        ) {
            let mut body = localities.to_le_bytes().to_vec();
            body.extend(cells);
            let bytes = table(b"SLIT", 1, &body, length, fix);
            parse_both_ways(b"SLIT", 0x1000, &bytes)?;
        }

        /// HPET, FADT and SPCR fixed fields at their extremes (every byte of
        /// the table 0, all ones or anything), at every length up to past
        /// their fields.
        #[test]
        fn fixed_layout_tables_with_extreme_fields(
            body in proptest::collection::vec(edge8(), 0..260),
            revision in edge8(),
            length in declared_length(),
            fix in any::<bool>(),
            high in any::<bool>(),
        ) {
            for signature in [b"HPET", b"FACP", b"SPCR"] {
                let bytes = table(signature, revision, &body, length, fix);
                parse_both_ways(signature, base(bytes.len(), high), &bytes)?;
            }
        }

        /// DMAR remapping structures and IVRS blocks with 16-bit lengths 0,
        /// 1, the header's, short, exact, 0xFFFF and anything.
        #[test]
        fn dmar_and_ivrs_with_extreme_structures(
            dmar in proptest::collection::vec(dmar_entry(), 0..10),
            ivrs in proptest::collection::vec(ivrs_entry(), 0..10),
            width in edge8(),
            length in declared_length(),
            fix in any::<bool>(),
        ) {
            let mut body = vec![width, 0xFF, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
            body.extend(dmar.concat());
            let bytes = table(b"DMAR", 1, &body, length, fix);
            parse_both_ways(b"DMAR", 0x1000, &bytes)?;
            let mut body = vec![0xFFu8; 12];
            body.extend(ivrs.concat());
            let bytes = table(b"IVRS", 2, &body, length, fix);
            parse_both_ways(b"IVRS", 0x1000, &bytes)?;
        }

        /// A whole firmware image (RSDP, XSDT, the tables it lists) in which
        /// every table is one of the above with extreme contents.
        #[test]
        fn a_firmware_image_of_extreme_tables(
            madt in proptest::collection::vec(madt_entry(), 0..6),
            mcfg in proptest::collection::vec(mcfg_entry(), 0..4),
            srat in proptest::collection::vec(srat_entry(), 0..6),
            fixed in proptest::collection::vec(edge8(), 0..260),
            pointers in proptest::collection::vec(edge64(), 0..3),
        ) {
            let tables = [
                table(b"APIC", 3, &madt_body(0xFEE0_0000, 1, &madt), None, true),
                table(b"MCFG", 1, &[vec![0u8; 8], mcfg.concat()].concat(), None, true),
                table(b"SRAT", 3, &[vec![1u8; 12], srat.concat()].concat(), None, true),
                table(b"FACP", 6, &fixed, None, true),
                table(b"HPET", 1, &fixed, None, true),
                table(b"SPCR", 4, &fixed, None, true),
                table(b"DSDT", 2, &fixed, None, true),
            ];
            let mut image = vec![0u8; 0x100];
            let mut addresses: Vec<u64> = Vec::new();
            for bytes in &tables {
                addresses.push(image.len() as u64);
                image.extend_from_slice(bytes);
            }
            addresses.extend(pointers);
            let xsdt_at = image.len() as u64;
            image.extend(table(b"XSDT", 1, &xsdt_body(&addresses), None, true));
            image[..36].copy_from_slice(&rsdp_v2(0, xsdt_at));
            let memory = SliceMemory::new(0, &image);
            let rsdp = Rsdp::read(&memory, 0).expect("the image's RSDP");
            if let Ok(tables) = AcpiTables::new(memory, &rsdp) {
                let _ = (tables.madt(), tables.mcfg(), tables.srat(), tables.numa(), tables.hpet());
                let _ = (tables.fadt(), tables.spcr(), tables.definition_blocks());
            }
        }
    }
}

// ---- configuration space, ECAM and AML values at their extremes -------------------------------

mod pci_and_aml_extremes {
    use super::*;
    use platform::acpi::{EcamWindow, PHYS_ADDRESS_LIMIT};
    use platform::aml::config_access;
    use platform::irq::choose_interrupt_mode;
    use platform::pci::{
        BarSlot, ConfigSpace, MAX_BAR_SIZE, PciListing, ScanMode, apply_plan, ecam_offset, enumerate, find_root_buses,
        refuse_outside_laid_out_tree,
    };
    use proptest::prelude::*;

    fn edge32() -> impl Strategy<Value = u32> {
        prop_oneof![
            Just(0u32),
            Just(1),
            Just(u32::MAX),
            (1u32..64).prop_map(|k| u32::MAX - k),
            (0u32..32).prop_map(|shift| 1u32 << shift),
            (0u32..32).prop_map(|shift| !((1u32 << shift) - 1)),
            any::<u32>(),
        ]
    }

    fn edge64() -> impl Strategy<Value = u64> {
        prop_oneof![
            Just(0u64),
            Just(u64::MAX),
            (1u64..64).prop_map(|k| u64::MAX - k),
            (0u32..64).prop_map(|shift| 1u64 << shift),
            (1u64..=256).prop_map(|buses| PHYS_ADDRESS_LIMIT - (buses << 20)),
            any::<u64>(),
        ]
    }

    /// A function at `(bus, device)`: an endpoint or a bridge (bus numbers
    /// in any order, windows all ones or anything), its six BAR dwords and
    /// their writable masks at the extremes, and MSI and MSI-X capabilities
    /// whose control words, table offsets, BIRs and sizes are extreme (the
    /// list looping back to its start sometimes).
    fn function() -> impl Strategy<Value = (u8, u8, FakeFunction)> {
        (
            0u8..3,
            0u8..4,
            any::<bool>(),
            proptest::collection::vec((edge32(), edge32()), 6),
            (any::<u8>(), any::<u8>(), any::<u8>()),
            (edge32(), edge32(), edge32()),
            (any::<u16>(), any::<u16>(), edge32(), edge32(), any::<bool>()),
        )
            .prop_map(
                |(bus, device, bridge, bars, buses, windows, (msi, msix, table, pba, looped))| {
                    let mut function = if bridge {
                        FakeFunction::bridge(0x1B36, 0x000C, buses.0, buses.1, buses.2)
                    } else {
                        FakeFunction::endpoint(0x1AF4, 0x1000, 0x01, 0x00)
                    };
                    let slots = if bridge { 2 } else { 6 };
                    for (slot, &(value, writable)) in bars.iter().enumerate().take(slots) {
                        function = function.bar_raw(slot, value, writable);
                    }
                    if bridge {
                        // I/O, memory and prefetchable base/limit, and the prefetchable upper halves.
                        function.regs[7] = windows.0;
                        function.regs[8] = windows.1;
                        function.regs[9] = windows.2;
                        function.regs[10] = windows.1;
                        function.regs[11] = windows.2;
                    }
                    let function = function
                        .cap_pointer(0x40)
                        .capability(0x40, 0x05, 0x60, msi, &[(u32::MAX, u32::MAX); 5])
                        .capability(0x60, 0x11, 0xFC, msix, &[(table, 0), (pba, 0)])
                        .capability(0xFC, 0x10, if looped { 0x40 } else { 0 }, 0, &[]);
                    (bus, device, function)
                },
            )
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

        /// Enumeration in every mode, the root-bus search, resource planning
        /// and its application, over functions whose BARs, bus numbers,
        /// windows and MSI/MSI-X fields are at their extremes: whatever is
        /// accepted lies inside the physical address space and its BAR.
        #[test]
        fn configuration_space_at_its_extremes(functions in proptest::collection::vec(function(), 1..6)) {
            let config = FakeConfig::new();
            for (bus, device, function) in &functions {
                config.add(*bus, *device, 0, function.clone());
            }
            for mode in [ScanMode::FollowBridges, ScanMode::AllBuses, ScanMode::EveryRoot] {
                let mut found = enumerate(&config, 0, 0..=255, mode).expect("standard offsets");
                refuse_outside_laid_out_tree(&mut found, Some((0, 0)));
                for function in &found {
                    for bar in function.bars.iter().filter_map(BarSlot::bar) {
                        prop_assert!(bar.size.is_power_of_two());
                        if bar.is_memory() {
                            prop_assert!(bar.size <= MAX_BAR_SIZE);
                            prop_assert!(bar.address.checked_add(bar.size).is_some_and(|end| end <= PHYS_ADDRESS_LIMIT));
                        }
                    }
                    if let Some(msix) = function.msix {
                        for (start, len) in [msix.table_region(function.address, &function.bars), msix.pba_region(function.address, &function.bars)].into_iter().flatten() {
                            let inside = function.bars.iter().filter_map(BarSlot::bar).any(|bar| {
                                bar.address <= start && start.checked_add(len).is_some_and(|end| end <= bar.address + bar.size)
                            });
                            prop_assert!(inside, "MSI-X structure {:#x}+{:#x} outside its BAR", start, len);
                        }
                    }
                    let _ = choose_interrupt_mode(function, u16::MAX, None, None);
                }
                let _ = format!("{}", PciListing(&found));
            }
            let _ = find_root_buses(&config, 0, 0..=255);
            // A reversed bus range scans nothing.
            #[allow(clippy::reversed_empty_ranges)]
            let reversed = 255..=0;
            prop_assert!(enumerate(&config, 0, reversed.clone(), ScanMode::AllBuses).expect("no access").is_empty());
            prop_assert!(find_root_buses(&config, 0, reversed).expect("no access").is_empty());
            let windows = ResourceWindows {
                memory: 0xC000_0000..0xFEC0_0000,
                io: Some(0xC000..0x1_0000),
                buses: 0..=255,
            };
            let plan = plan_resources(&config, 0, &windows).expect("standard offsets");
            for bar in &plan.bars {
                prop_assert!(bar.address.checked_add(bar.size).is_some());
            }
            apply_plan(&config, &plan).expect("standard offsets");
        }

        /// ECAM windows with bases near 2^64 and the 52-bit limit, start bus
        /// above end bus: `region` refuses what would wrap or pass the limit,
        /// and an offset is only computed inside the window.
        #[test]
        fn ecam_windows_at_their_extremes(
            base in edge64(),
            segment in any::<u16>(),
            buses in (any::<u8>(), any::<u8>()),
            access in (any::<u16>(), any::<u8>(), 0u8..32, 0u8..8, any::<u16>()),
        ) {
            let window = EcamWindow { base, segment, bus_start: buses.0, bus_end: buses.1 };
            match window.region() {
                Ok(region) => {
                    prop_assert!(buses.0 <= buses.1);
                    prop_assert!(region.start <= region.end && region.end <= PHYS_ADDRESS_LIMIT);
                    prop_assert_eq!(region.end - region.start, window.region_len());
                    prop_assert_eq!(region.start, window.region_base());
                }
                Err(error) => {
                    let named = matches!(error, Error::McfgWindowAddress { .. });
                    prop_assert!(named);
                }
            }
            let (segment, bus, device, function, offset) = access;
            if let Ok(at) = ecam_offset(&window, PciAddress::new(segment, bus, device, function), offset) {
                prop_assert!((at as u64) < window.region_len());
            }
        }

        /// A `PCI_Config` region access at any offset and width: inside the
        /// 4 KiB space or refused.
        #[test]
        fn config_region_accesses_at_any_offset(offset in edge64(), width in any::<u8>(), write in any::<Option<u64>>()) {
            let config = FakeConfig::new();
            config.add(0, 1, 0, FakeFunction::endpoint(0x8086, 0x1234, 1, 0));
            let space = ConfigSpace::new(&config, PciAddress::new(0, 0, 1, 0));
            if config_access(&space, offset, width, write).is_ok() {
                prop_assert!(matches!(width, 1 | 2 | 4 | 8));
                prop_assert!(offset + u64::from(width) <= 256);
            }
        }

        /// Host bridge `_SEG`, `_BBN`, `_PXM` and `_PRT` entries with 64-bit
        /// values: discovery keeps what fits and reports the rest; route
        /// look-ups with any path and pin end.
        #[test]
        fn host_bridge_values_at_their_extremes(
            values in (edge64(), edge64(), edge64()),
            entries in proptest::collection::vec((edge64(), prop_oneof![0u64..5, edge64()], edge64()), 0..6),
            path in proptest::collection::vec((any::<u8>(), any::<u8>()), 0..4),
            pin in any::<u8>(),
        ) {
            let found = discovered(&host_bridge_aml(
                &[(b"_SEG", values.0), (b"_BBN", values.1), (b"_PXM", values.2)],
                &prt(&entries),
            ));
            let bridge = &found.bridges[0];
            prop_assert_eq!(u64::from(bridge.segment), if values.0 <= 0xFFFF { values.0 } else { 0 });
            prop_assert_eq!(bridge.bbn.map(u64::from), (values.1 <= 0xFF).then_some(values.1));
            prop_assert_eq!(bridge.pxm.map(u64::from), (values.2 <= 0xFFFF_FFFF).then_some(values.2));
            let table = &found.prts[0];
            prop_assert_eq!(table.routes.len() + table.unresolved, entries.len());
            for route in &table.routes {
                prop_assert!(route.device <= 31 && route.pin <= 3);
            }
            let _ = found.route_for(bridge.segment, bridge.root_bus(), &path, pin);
            let _ = found.proximity_for(bridge.segment, bridge.root_bus(), &path);
        }
    }
}

// ---- AML arithmetic on firmware values at their extremes ---------------------------------------

mod aml_extremes {
    use super::*;
    use platform::aml::Object;
    use proptest::prelude::*;

    fn edge64() -> impl Strategy<Value = u64> {
        prop_oneof![
            Just(0u64),
            Just(1),
            Just(u64::MAX),
            (1u64..72).prop_map(|k| u64::MAX - k),
            (0u32..64).prop_map(|shift| 1u64 << shift),
            0u64..64,
            any::<u64>(),
        ]
    }

    /// A PkgLength-encoded number (field widths and reserved gaps), up to 28 bits.
    fn pkg_number(value: u32) -> Vec<u8> {
        let value = value & 0x0FFF_FFFF;
        match value {
            0..=0x3F => vec![value as u8],
            0x40..=0xFFF => vec![0x40 | (value & 0xF) as u8, (value >> 4) as u8],
            0x1000..=0xF_FFFF => vec![0x80 | (value & 0xF) as u8, (value >> 4) as u8, (value >> 12) as u8],
            _ => vec![
                0xC0 | (value & 0xF) as u8,
                (value >> 4) as u8,
                (value >> 12) as u8,
                (value >> 20) as u8,
            ],
        }
    }

    fn method(seg: &[u8; 4], body: &[u8]) -> Vec<u8> {
        let mut contents = seg.to_vec();
        contents.push(0);
        contents.extend_from_slice(body);
        let mut out = vec![0x14];
        out.extend(pkg(&contents));
        out
    }

    fn returns(value: Vec<u8>) -> Vec<u8> {
        let mut out = vec![0xA4];
        out.extend(value);
        out
    }

    fn op(code: &[u8], args: &[Vec<u8>]) -> Vec<u8> {
        let mut out = code.to_vec();
        for arg in args {
            out.extend_from_slice(arg);
        }
        out
    }

    #[derive(Debug, Clone)]
    struct Values {
        space: u8,
        region: (u64, u64),
        flags: u8,
        gap: u32,
        bits: u32,
        stored: u64,
        buffer_size: u64,
        index: u64,
        mid: (u64, u64),
        length: u64,
        bit_field: (u64, u64),
    }

    fn values() -> impl Strategy<Value = Values> {
        (
            prop_oneof![Just(0u8), Just(1), Just(2), any::<u8>()],
            (edge64(), edge64()),
            any::<u8>(),
            prop_oneof![Just(0u32), Just(0x0FFF_FFFF), any::<u32>()],
            prop_oneof![
                Just(0u32),
                Just(1),
                Just(64),
                Just(65),
                Just(0x8_0000),
                Just(0x0FFF_FFFF),
                0u32..200
            ],
            (
                edge64(),
                prop_oneof![Just(0u64), Just(16), Just(1 << 16), Just(u64::MAX), 0u64..64],
            ),
            (edge64(), (edge64(), edge64()), edge64(), (edge64(), edge64())),
        )
            .prop_map(
                |(space, region, flags, gap, bits, (stored, buffer_size), (index, mid, length, bit_field))| Values {
                    space,
                    region,
                    flags,
                    gap,
                    bits,
                    stored,
                    buffer_size,
                    index,
                    mid,
                    length,
                    bit_field,
                },
            )
    }

    /// Operation region, field, buffer and the operators that index them,
    /// each fed the values: region offset and length, field gap and width,
    /// buffer size, CreateQWordField/CreateField indexes, Mid, ToString,
    /// Index and Match start.
    fn block(v: &Values) -> Vec<u8> {
        let mut aml = vec![0x5B, 0x80];
        aml.extend_from_slice(b"REG0");
        aml.push(v.space);
        aml.extend(qword(v.region.0));
        aml.extend(qword(v.region.1));
        let mut field = b"REG0".to_vec();
        field.push(v.flags);
        field.push(0x00);
        field.extend(pkg_number(v.gap));
        field.extend_from_slice(b"FLD0");
        field.extend(pkg_number(v.bits));
        aml.extend([0x5B, 0x81]);
        aml.extend(pkg(&field));
        let mut buffer = qword(v.buffer_size);
        buffer.extend_from_slice(&[0xA5; 16]);
        let mut buffer_op = vec![0x11];
        buffer_op.extend(pkg(&buffer));
        aml.extend(name(b"BUF0", buffer_op));
        let buf = b"BUF0".to_vec();
        aml.extend(method(b"MTH0", &returns(b"FLD0".to_vec())));
        aml.extend(method(b"MTH1", &op(&[0x70], &[qword(v.stored), b"FLD0".to_vec()])));
        aml.extend(method(
            b"MTH2",
            &[
                op(&[0x8F], &[buf.clone(), qword(v.index), b"QW00".to_vec()]),
                returns(b"QW00".to_vec()),
            ]
            .concat(),
        ));
        aml.extend(method(
            b"MTH3",
            &[
                op(
                    &[0x5B, 0x13],
                    &[
                        buf.clone(),
                        qword(v.bit_field.0),
                        qword(v.bit_field.1),
                        b"BF00".to_vec(),
                    ],
                ),
                op(&[0x70], &[qword(v.stored), b"BF00".to_vec()]),
                returns(b"BF00".to_vec()),
            ]
            .concat(),
        ));
        aml.extend(method(
            b"MTH4",
            &returns(op(&[0x9E], &[buf.clone(), qword(v.mid.0), qword(v.mid.1), vec![0x00]])),
        ));
        aml.extend(method(
            b"MTH5",
            &returns(op(&[0x9C], &[buf.clone(), qword(v.length), vec![0x00]])),
        ));
        aml.extend(method(
            b"MTH6",
            &returns(op(&[0x83], &[op(&[0x88], &[buf.clone(), qword(v.index), vec![0x00]])])),
        ));
        aml.extend(method(
            b"MTH7",
            &returns(op(
                &[0x89],
                &[
                    package(&[vec![0x01], vec![0x0A, 0x02], qword(u64::MAX)]),
                    vec![0x01],
                    qword(v.stored),
                    vec![0x00],
                    vec![0x00],
                    qword(v.index),
                ],
            )),
        ));
        aml
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

        /// Each method ends with a value or an `Error::Aml`, never a panic;
        /// a field read through the region never reaches past its length.
        #[test]
        fn aml_indexes_offsets_and_widths_at_their_extremes(v in values()) {
            let mut regions = FixedRegions { value: u64::MAX, ..FixedRegions::default() };
            let mut interp = aml::load(&mut regions, &[(2, block(&v))]);
            for problem in &interp.load_problems {
                let named = matches!(problem.error, Error::Aml { .. });
                prop_assert!(named);
            }
            for method in ["\\MTH0", "\\MTH1", "\\MTH2", "\\MTH3", "\\MTH4", "\\MTH5", "\\MTH6", "\\MTH7", "\\FLD0"] {
                let path = Path::parse(method).expect("valid path");
                match interp.evaluate(&path, Vec::new()) {
                    Ok(Object::Buffer(bytes)) => prop_assert!(bytes.len() <= 1 << 16, "beyond the object limit"),
                    Ok(_) => {}
                    Err(error) => {
                        let named = matches!(error, Error::Aml { .. });
                        prop_assert!(named, "{}", error);
                    }
                }
            }
        }
    }
}
