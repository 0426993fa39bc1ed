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
