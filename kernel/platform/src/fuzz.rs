//! Fuzz checks: one function per target, shared by the fixed-count fuzz
//! passes in `tests/fuzz_passes.rs` and the cargo-fuzz targets in `fuzz/`
//! (`cargo xtask fuzz`). Each takes arbitrary bytes, runs the parsers, and
//! panics if an invariant breaks; errors are fine (they are `platform::Error`s, and
//! their `Display` is exercised). Not part of the kernel's API.

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::vec::Vec;
use core::cell::RefCell;
use core::ops::Range;

use crate::acpi::{AcpiTables, Madt, Mcfg, PHYS_ADDRESS_LIMIT, Rsdp, SDT_HEADER_LEN, Sdt, SliceMemory};
use crate::error::TableSignature;
use crate::irq::choose_interrupt_mode;
use crate::pci::{
    BarKind, BarSlot, CommandRegister, ConfigRegionAccess, DeviceMatch, PciAddress, PciDriver, PciFunction, PciListing,
    ResourceWindows, ScanMode, apply_plan, enumerate, match_driver, plan_resources,
};

/// Where [`acpi_rsdp`] places its input (the BIOS area the scan searches).
pub const RSDP_AT: u64 = 0xE_0000;

/// An RSDP: parsed from the bytes, read at [`RSDP_AT`], and found by the
/// BIOS-area scan.
pub fn acpi_rsdp(data: &[u8]) {
    let check = |rsdp: &Rsdp| {
        if rsdp.revision >= 2 {
            assert!(rsdp.xsdt_address.is_some(), "ACPI 2.0 RSDP without XSDT address");
        }
    };
    match Rsdp::parse(data) {
        Ok(rsdp) => {
            assert!(data.starts_with(b"RSD PTR "));
            assert_eq!(data[..20].iter().fold(0u8, |sum, b| sum.wrapping_add(*b)), 0);
            check(&rsdp);
        }
        Err(error) => drop(format!("{error}")),
    }
    let memory = SliceMemory::new(RSDP_AT, data);
    if let Ok(rsdp) = Rsdp::read(&memory, RSDP_AT) {
        assert_eq!(rsdp.phys, Some(RSDP_AT));
        check(&rsdp);
    }
    if let Ok(rsdp) = Rsdp::find_in_bios_areas(&memory) {
        let phys = rsdp.phys.unwrap_or_default();
        assert!(phys >= RSDP_AT && phys % 16 == 0, "RSDP found at {phys:#x}");
        check(&rsdp);
    }
}

/// A firmware image at physical 0: byte 0 holds flags (bit 0: fix the RSDP
/// and table checksums before parsing, so mutations reach the table
/// walkers), then the image, with the RSDP at offset 0.
pub fn acpi_tables(data: &[u8]) {
    let Some((&flags, image)) = data.split_first() else {
        return;
    };
    let mut image = image.to_vec();
    if flags & 1 != 0 {
        fix_checksums(&mut image);
    }
    let memory = SliceMemory::new(0, &image);
    let Ok(rsdp) = Rsdp::read(&memory, 0) else { return };
    let tables = match AcpiTables::new(memory, &rsdp) {
        Ok(tables) => tables,
        Err(error) => return drop(format!("{error}")),
    };
    assert!(tables.root().length >= SDT_HEADER_LEN);
    for summary in tables.tables().flatten() {
        assert!(summary.phys != 0);
    }
    for signature in [TableSignature::MADT, TableSignature::MCFG, TableSignature(*b"FACP")] {
        if let Ok(table) = tables.find(signature) {
            check_loaded(&table, image.len());
        }
    }
    match tables.madt() {
        Ok(madt) => check_madt(&madt),
        Err(error) => drop(format!("{error}")),
    }
    match tables.mcfg() {
        Ok(Some(mcfg)) => check_mcfg(&mcfg),
        Ok(None) => {}
        Err(error) => drop(format!("{error}")),
    }
}

/// Recomputes the RSDP checksums and those of the root table and every
/// table it lists (where they lie inside the image).
pub fn fix_checksums(image: &mut [u8]) {
    fn fix(bytes: &mut [u8], at: usize) {
        bytes[at] = 0;
        let sum = bytes.iter().fold(0u8, |sum, b| sum.wrapping_add(*b));
        bytes[at] = sum.wrapping_neg();
    }
    if image.len() < 36 {
        return;
    }
    fix(&mut image[..20], 8);
    fix(&mut image[..36], 32);
    let rsdt = u32::from_le_bytes([image[16], image[17], image[18], image[19]]) as usize;
    let xsdt = u64::from_le_bytes(image[24..32].try_into().unwrap_or_default());
    let fix_table = |image: &mut [u8], at: usize| -> Option<(usize, usize)> {
        let length = u32::from_le_bytes(image.get(at.checked_add(4)?..at.checked_add(8)?)?.try_into().ok()?) as usize;
        if length < 36 || at.checked_add(length)? > image.len() {
            return None;
        }
        fix(&mut image[at..at + length], 9);
        Some((at, length))
    };
    for (root, entry) in [(rsdt, 4usize), (usize::try_from(xsdt).unwrap_or(usize::MAX), 8)] {
        let Some((at, length)) = fix_table(image, root) else {
            continue;
        };
        for index in 0..(length - 36) / entry {
            let offset = at + 36 + index * entry;
            let mut address = [0u8; 8];
            address[..entry].copy_from_slice(&image[offset..offset + entry]);
            if let Ok(table) = usize::try_from(u64::from_le_bytes(address)) {
                fix_table(image, table);
            }
        }
        // The root's own checksum covers the entries, which did not change.
    }
}

/// A validated table lies inside the memory it was read from.
fn check_loaded(table: &Sdt, image_len: usize) {
    assert!(table.length >= SDT_HEADER_LEN);
    let end = table.phys.checked_add(u64::from(table.length));
    assert!(end.is_some_and(|end| end <= image_len as u64), "table past the image");
}

/// The input as the body of an "APIC" table (correct length and checksum).
pub fn acpi_madt(data: &[u8]) {
    let table = table_with_body(b"APIC", data);
    let memory = SliceMemory::new(0x1000, &table);
    let Ok(sdt) = Sdt::load(&memory, 0x1000, None, SDT_HEADER_LEN) else {
        return;
    };
    match Madt::parse(&memory, &sdt) {
        Ok(madt) => check_madt(&madt),
        Err(error) => drop(format!("{error}")),
    }
}

/// The input as the body of an "MCFG" table (correct length and checksum).
pub fn acpi_mcfg(data: &[u8]) {
    let table = table_with_body(b"MCFG", data);
    let memory = SliceMemory::new(0x1000, &table);
    let Ok(sdt) = Sdt::load(&memory, 0x1000, None, SDT_HEADER_LEN) else {
        return;
    };
    match Mcfg::parse(&memory, &sdt) {
        Ok(mcfg) => {
            assert_eq!(mcfg.windows.len(), (data.len() - 8) / 16);
            check_mcfg(&mcfg);
        }
        Err(error) => drop(format!("{error}")),
    }
}

/// The server tables: the first byte picks SRAT, SLIT, HPET, FACP, DMAR or
/// IVRS, the rest is the table body (correct length and checksum). Parsed
/// values are checked against the table they came from.
pub fn acpi_server_tables(data: &[u8]) {
    use crate::acpi::{Dmar, Fadt, Hpet, Ivrs, NumaTopology, Slit, Srat, cpu_index_order};
    const KINDS: [&[u8; 4]; 6] = [b"SRAT", b"SLIT", b"HPET", b"FACP", b"DMAR", b"IVRS"];
    let Some((&kind, body)) = data.split_first() else {
        return;
    };
    let signature = KINDS[usize::from(kind) % KINDS.len()];
    let table = table_with_body(signature, body);
    let memory = SliceMemory::new(0x1000, &table);
    let Ok(sdt) = Sdt::load(&memory, 0x1000, None, SDT_HEADER_LEN) else {
        return;
    };
    let length = table.len();
    let result = match signature {
        b"SRAT" => Srat::parse(&memory, &sdt).map(|srat| {
            // Each entry takes at least 16 bytes after the 48-byte header.
            assert!((srat.cpus.len() + srat.memory.len()) * 16 <= length.saturating_sub(48));
            let numa = NumaTopology::new(&srat, None);
            let ids: Vec<u32> = srat.cpus.iter().map(|cpu| cpu.apic_id).collect();
            let order = cpu_index_order(ids.iter().copied(), ids.first().copied().unwrap_or(0));
            for node in &numa.nodes {
                drop(format!("{}", numa.describe(node, &order)));
                for range in &node.memory {
                    assert!(range.start <= range.end);
                    if range.start < range.end {
                        assert!(numa.node_of_address(range.start).is_some());
                    }
                }
            }
            for cpu in srat.cpus.iter().filter(|cpu| cpu.enabled) {
                assert!(numa.node_of_apic_id(cpu.apic_id).is_some());
            }
        }),
        b"SLIT" => Slit::parse(&memory, &sdt).map(|slit| {
            assert!(slit.localities * slit.localities <= length - 44);
            let last = slit.localities.saturating_sub(1) as u32;
            assert_eq!(slit.distance(last, last).is_some(), slit.localities > 0);
            assert_eq!(slit.distance(slit.localities as u32, 0), None);
            let _ = slit.is_consistent();
        }),
        b"HPET" => Hpet::parse(&memory, &sdt).map(|hpet| assert_ne!(hpet.base, 0)),
        b"FACP" => Fadt::parse(&memory, &sdt).map(|fadt| {
            if let Ok(pm) = fadt.pm_timer {
                assert!(pm.port != 0 && (pm.bits == 24 || pm.bits == 32));
            }
        }),
        b"DMAR" => Dmar::parse(&memory, &sdt).map(|dmar| {
            assert!((dmar.units.len() * 16 + dmar.reserved_regions.len() * 24) <= length - 48);
        }),
        _ => Ivrs::parse(&memory, &sdt).map(|ivrs| {
            assert!(ivrs.units.len() * 24 <= length - 48);
        }),
    };
    if let Err(error) = result {
        drop(format!("{error}"));
    }
}

pub fn table_with_body(signature: &[u8; 4], body: &[u8]) -> Vec<u8> {
    let mut table = Vec::with_capacity(36 + body.len());
    table.extend_from_slice(signature);
    table.extend_from_slice(&(36 + body.len() as u32).to_le_bytes());
    table.extend_from_slice(&[1, 0]);
    table.extend_from_slice(b"BAREMQFUZZTABLE\0\0\0\0\0\0\0\0\0\0\0\0\0\0");
    table.truncate(36);
    table.extend_from_slice(body);
    let sum = table.iter().fold(0u8, |sum, b| sum.wrapping_add(*b));
    table[9] = sum.wrapping_neg();
    table
}

fn check_madt(madt: &Madt) {
    let mut ids: Vec<u32> = madt.usable_cpus().map(|cpu| cpu.apic_id).collect();
    let usable = ids.len();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), usable, "duplicate usable APIC ids kept");
    assert!(madt.local_apic_nmis.len() <= madt.local_apic_nmi_entries as usize);
    for io_apic in &madt.io_apics {
        let (found, pin) = madt.io_apic_for_gsi(io_apic.gsi_base).expect("its own GSI base");
        assert_eq!(pin, 0);
        assert_eq!(found.gsi_base, io_apic.gsi_base);
    }
    for irq in 0..=255u8 {
        let _ = madt.isa_irq_route(irq);
        let _ = madt.pci_line_route(irq);
    }
}

fn check_mcfg(mcfg: &Mcfg) {
    for window in &mcfg.windows {
        let region = window.region().expect("parsed windows have a valid region");
        assert!(region.end <= PHYS_ADDRESS_LIMIT);
        assert_eq!(region.start, window.region_base());
        assert_eq!(region.end - region.start, window.region_len());
    }
}

// ---- PCI ------------------------------------------------------------------------------------

/// Bytes per fake function in the PCI targets: bus, device, function,
/// 64 configuration dwords, then writable masks for dwords 1..=16 (command,
/// BARs, bridge bus numbers and windows).
pub const PCI_RECORD_LEN: usize = 3 + 256 + 64;

/// One function's 64 configuration dwords and their writable masks.
type FuzzFunction = ([u32; 64], [u32; 64]);

/// A configuration space decoded from fuzz input. Configuration cycles
/// are routed as bridges route them: a bus other than 0 is reachable only
/// through a bridge on a lower, reachable bus whose secondary..=subordinate
/// covers it. Writes honour the writable masks; the status half of the
/// command dword is write-one-to-clear.
#[derive(Debug, Default)]
pub struct FuzzConfig {
    functions: RefCell<BTreeMap<PciAddress, FuzzFunction>>,
}

impl FuzzConfig {
    /// Decodes `data` as records of [`PCI_RECORD_LEN`] bytes (buses 0..8).
    pub fn decode(data: &[u8]) -> FuzzConfig {
        let config = FuzzConfig::default();
        for record in data.chunks_exact(PCI_RECORD_LEN) {
            let address = PciAddress::new(0, record[0] % 8, record[1] % 32, record[2] % 8);
            let mut regs = [0u32; 64];
            for (index, dword) in record[3..259].chunks_exact(4).enumerate() {
                regs[index] = u32::from_le_bytes([dword[0], dword[1], dword[2], dword[3]]);
            }
            let mut writable = [0u32; 64];
            for (index, dword) in record[259..].chunks_exact(4).enumerate() {
                writable[index + 1] = u32::from_le_bytes([dword[0], dword[1], dword[2], dword[3]]);
            }
            config.functions.borrow_mut().insert(address, (regs, writable));
        }
        config
    }

    fn visible(&self, bus: u8) -> bool {
        if bus == 0 {
            return true;
        }
        let routes: Vec<(u8, u8, u8)> = self
            .functions
            .borrow()
            .iter()
            .filter(|(_, (regs, _))| (regs[3] >> 16) & 0x7F == 1)
            .map(|(address, (regs, _))| (address.bus(), (regs[6] >> 8) as u8, (regs[6] >> 16) as u8))
            .collect();
        routes.into_iter().any(|(on, secondary, subordinate)| {
            on < bus && secondary != 0 && (secondary..=subordinate).contains(&bus) && self.visible(on)
        })
    }

    /// The dword at `offset` of `address` (all-ones when absent).
    pub fn register(&self, address: PciAddress, offset: u16) -> u32 {
        self.functions
            .borrow()
            .get(&address)
            .map_or(u32::MAX, |(regs, _)| regs[usize::from(offset / 4) % 64])
    }
}

impl ConfigRegionAccess for FuzzConfig {
    unsafe fn read(&self, address: PciAddress, offset: u16) -> u32 {
        assert!(
            offset < 256 && offset.is_multiple_of(4),
            "configuration offset {offset:#x}"
        );
        if !self.visible(address.bus()) {
            return u32::MAX;
        }
        self.register(address, offset)
    }

    unsafe fn write(&self, address: PciAddress, offset: u16, value: u32) {
        assert!(
            offset < 256 && offset.is_multiple_of(4),
            "configuration offset {offset:#x}"
        );
        if !self.visible(address.bus()) {
            return;
        }
        let mut functions = self.functions.borrow_mut();
        let Some((regs, writable)) = functions.get_mut(&address) else {
            return;
        };
        let index = usize::from(offset / 4);
        if index == 1 {
            let status = (regs[1] >> 16) & !(value >> 16);
            regs[1] = status << 16 | (regs[1] & 0xFFFF & !writable[1]) | (value & 0xFFFF & writable[1]);
            return;
        }
        regs[index] = (regs[index] & !writable[index]) | (value & writable[index]);
    }
}

/// Enumeration of a fuzzed configuration space: BARs, capabilities,
/// MSI / MSI-X, the listing and the interrupt-mode choice.
pub fn pci_config(data: &[u8]) {
    let config = FuzzConfig::decode(data);
    for mode in [ScanMode::FollowBridges, ScanMode::AllBuses, ScanMode::EveryRoot] {
        let Ok(functions) = enumerate(&config, 0, 0..=7, mode) else {
            panic!("enumeration failed on standard-space offsets");
        };
        assert!(functions.len() <= config.functions.borrow().len());
        for function in &functions {
            check_function(function);
        }
        let _ = format!("{}", PciListing(&functions));
    }
}

fn check_function(function: &PciFunction) {
    let mut offsets: Vec<u8> = function.capabilities.iter().map(|c| c.offset).collect();
    for &offset in &offsets {
        assert!(
            (0x40..=0xFC).contains(&offset) && offset % 4 == 0,
            "capability at {offset:#x}"
        );
    }
    offsets.sort_unstable();
    offsets.dedup();
    assert_eq!(offsets.len(), function.capabilities.len(), "capability list loops");
    if let Some(msi) = function.msi {
        assert!(usize::from(msi.offset) + usize::from(msi.size_bytes()) <= 256);
    }
    for (slot, entry) in function.bars.iter().enumerate() {
        let BarSlot::Bar(bar) = entry else { continue };
        assert_eq!(usize::from(bar.slot), slot);
        assert!(bar.size.is_power_of_two(), "BAR size {:#x}", bar.size);
        if bar.kind == BarKind::Memory64 {
            assert_eq!(function.bars.get(slot + 1), Some(&BarSlot::Upper64));
            assert!(bar.size <= crate::pci::MAX_BAR_SIZE);
            assert!(
                bar.address
                    .checked_add(bar.size)
                    .is_some_and(|end| end <= PHYS_ADDRESS_LIMIT)
            );
        }
    }
    if let Some(msix) = function.msix {
        assert!((1..=2048).contains(&msix.table_size));
        let regions = [
            msix.table_region(function.address, &function.bars),
            msix.pba_region(function.address, &function.bars),
        ];
        for (start, len) in regions.into_iter().flatten() {
            let inside = function
                .bars
                .iter()
                .filter_map(BarSlot::bar)
                .any(|bar| bar.is_memory() && bar.address <= start && start + len <= bar.address + bar.size);
            assert!(inside, "MSI-X structure {start:#x}+{len:#x} outside its BAR");
        }
    }
    let _ = choose_interrupt_mode(function, 8, None, None);
}

/// The 32-bit hole and I/O range [`pci_assign`] plans in.
pub const FUZZ_HOLE: Range<u64> = 0xC000_0000..0xFEC0_0000;
/// See [`FUZZ_HOLE`].
pub const FUZZ_IO: Range<u64> = 0xC000..0x1_0000;

/// Resource assignment on a fuzzed configuration space: everything placed
/// is inside the hole, naturally aligned, disjoint, inside every window of
/// the bridges above it; bridge bus ranges nest; refused functions get no
/// BAR, have decoding off, and no driver matches them.
pub fn pci_assign(data: &[u8]) {
    let config = FuzzConfig::decode(data);
    let windows = ResourceWindows {
        memory: FUZZ_HOLE,
        io: Some(FUZZ_IO),
        buses: 0..=7,
    };
    let Ok(plan) = plan_resources(&config, 0, &windows) else {
        panic!("planning failed on standard-space offsets");
    };
    let mut memory: Vec<Range<u64>> = Vec::new();
    for bar in &plan.bars {
        let range = bar.address..bar.address + bar.size;
        assert_eq!(bar.address % bar.size, 0, "BAR not naturally aligned: {bar:x?}");
        assert!(plan.refusal(bar.function).is_none(), "a refused function got a BAR");
        let window = if bar.kind == BarKind::Io { &FUZZ_IO } else { &FUZZ_HOLE };
        assert!(
            window.start <= range.start && range.end <= window.end,
            "{bar:x?} outside {window:x?}"
        );
        if bar.kind != BarKind::Io {
            memory.push(range.clone());
        }
        for bridge in plan
            .bridges
            .iter()
            .filter(|b| b.owned && plan.refusal(b.bridge).is_none())
        {
            if (bridge.secondary..=bridge.subordinate).contains(&bar.function.bus()) {
                let window = if bar.kind == BarKind::Io {
                    &bridge.io
                } else {
                    &bridge.memory
                };
                let window = window.clone().expect("a BAR behind a bridge with a closed window");
                assert!(
                    window.start <= range.start && range.end <= window.end,
                    "{bar:x?} outside {window:x?}"
                );
            }
        }
    }
    memory.sort_by_key(|range| range.start);
    for pair in memory.windows(2) {
        assert!(pair[0].end <= pair[1].start, "overlapping BARs {pair:x?}");
    }
    let bridges: Vec<_> = plan
        .bridges
        .iter()
        .filter(|b| plan.refusal(b.bridge).is_none())
        .collect();
    for a in &bridges {
        assert!(a.secondary > a.primary && a.secondary <= a.subordinate, "{a:?}");
        for b in &bridges {
            let (ra, rb) = (a.secondary..=a.subordinate, b.secondary..=b.subordinate);
            if a.bridge == b.bridge {
                continue;
            }
            let disjoint = ra.end() < rb.start() || rb.end() < ra.start();
            let nested = (ra.contains(rb.start()) && ra.contains(rb.end()))
                || (rb.contains(ra.start()) && rb.contains(ra.end()));
            assert!(disjoint || nested, "bus ranges cross: {a:?} {b:?}");
            // A bridge behind another: its windows inside the other's.
            if a.owned && b.owned && ra.contains(&b.primary) {
                for (outer, inner) in [(&a.memory, &b.memory), (&a.io, &b.io)] {
                    if let Some(inner) = inner {
                        let outer = outer.clone().expect("inner window open, outer closed");
                        assert!(outer.start <= inner.start && inner.end <= outer.end);
                    }
                }
            }
        }
    }
    if apply_plan(&config, &plan).is_err() {
        panic!("applying failed on standard-space offsets");
    }
    for refusal in &plan.refused {
        let command = CommandRegister::from_bits_retain(config.register(refusal.function, 4) as u16);
        let writable = config
            .functions
            .borrow()
            .get(&refusal.function)
            .map_or(0, |(_, w)| w[1]);
        let off = CommandRegister::from_bits_retain(writable as u16)
            & (CommandRegister::MEMORY_ENABLE | CommandRegister::IO_ENABLE | CommandRegister::BUS_MASTER_ENABLE);
        assert!(!command.intersects(off), "refused function still decodes");
        let _ = format!("{}", refusal.reason);
    }
    let Ok(mut functions) = enumerate(&config, 0, 0..=7, ScanMode::FollowBridges) else {
        panic!("enumeration failed on standard-space offsets");
    };
    plan.mark_refused(&mut functions);
    static ANY: [DeviceMatch; 1] = [DeviceMatch {
        vendor: None,
        device: None,
        class: None,
        subclass: None,
        prog_if: None,
    }];
    let drivers = [PciDriver {
        name: "any",
        matches: &ANY,
    }];
    for function in &functions {
        assert_eq!(
            match_driver(&drivers, function).is_none(),
            function.refused.is_some(),
            "{}",
            function.address
        );
    }
}
