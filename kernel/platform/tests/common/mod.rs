//! Shared fixtures: a fake physical address space, ACPI table builders, a
//! fake PCI configuration space and a fake MMIO region.
#![allow(dead_code, reason = "each test binary uses a different subset")]

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;

use platform::Error;
use platform::acpi::PhysMemory;
use platform::mmio::{Mmio32, check_access};
use platform::pci::{ConfigRegionAccess, PciAddress};

// ---------------------------------------------------------------------------------------------
// Physical memory

/// Disjoint regions of fake physical memory; a read must fall inside one region.
#[derive(Default, Clone, Debug)]
pub struct FakePhys {
    pub regions: Vec<(u64, Vec<u8>)>,
    pub reads: Cell<usize>,
}

impl FakePhys {
    pub fn new() -> FakePhys {
        FakePhys::default()
    }

    pub fn place(&mut self, base: u64, bytes: Vec<u8>) -> &mut FakePhys {
        self.regions.push((base, bytes));
        self
    }

    /// Writes into an existing region (used to corrupt bytes in place).
    pub fn poke(&mut self, phys: u64, bytes: &[u8]) {
        for (base, region) in &mut self.regions {
            if phys >= *base && phys + bytes.len() as u64 <= *base + region.len() as u64 {
                let start = (phys - *base) as usize;
                region[start..start + bytes.len()].copy_from_slice(bytes);
                return;
            }
        }
        panic!("poke outside fake memory at {phys:#x}");
    }
}

impl PhysMemory for FakePhys {
    fn read_bytes(&self, phys: u64, out: &mut [u8]) -> platform::Result<()> {
        self.reads.set(self.reads.get() + 1);
        for (base, region) in &self.regions {
            let Some(start) = phys.checked_sub(*base) else { continue };
            let end = start + out.len() as u64;
            if end <= region.len() as u64 {
                out.copy_from_slice(&region[start as usize..end as usize]);
                return Ok(());
            }
        }
        Err(Error::PhysRead { phys, len: out.len() })
    }
}

// ---------------------------------------------------------------------------------------------
// ACPI builders

pub fn checksum_fix(bytes: &mut [u8], at: usize) {
    bytes[at] = 0;
    let sum = bytes.iter().fold(0u8, |sum, &byte| sum.wrapping_add(byte));
    bytes[at] = 0u8.wrapping_sub(sum);
}

/// A table with a correct length and checksum.
pub fn sdt(signature: &[u8; 4], revision: u8, body: &[u8]) -> Vec<u8> {
    let mut table = Vec::new();
    table.extend_from_slice(signature);
    table.extend_from_slice(&((36 + body.len()) as u32).to_le_bytes());
    table.push(revision);
    table.push(0);
    table.extend_from_slice(b"BAREMQ");
    table.extend_from_slice(b"FIXTURE ");
    table.extend_from_slice(&1u32.to_le_bytes());
    table.extend_from_slice(b"TEST");
    table.extend_from_slice(&1u32.to_le_bytes());
    table.extend_from_slice(body);
    checksum_fix(&mut table, 9);
    table
}

pub fn rsdp_v1(rsdt: u32) -> Vec<u8> {
    let mut bytes = Vec::new();
    bytes.extend_from_slice(b"RSD PTR ");
    bytes.push(0);
    bytes.extend_from_slice(b"BOCHS ");
    bytes.push(0);
    bytes.extend_from_slice(&rsdt.to_le_bytes());
    checksum_fix(&mut bytes, 8);
    bytes
}

pub fn rsdp_v2(rsdt: u32, xsdt: u64) -> Vec<u8> {
    let mut bytes = Vec::new();
    bytes.extend_from_slice(b"RSD PTR ");
    bytes.push(0);
    bytes.extend_from_slice(b"BOCHS ");
    bytes.push(2);
    bytes.extend_from_slice(&rsdt.to_le_bytes());
    bytes.extend_from_slice(&36u32.to_le_bytes());
    bytes.extend_from_slice(&xsdt.to_le_bytes());
    bytes.extend_from_slice(&[0, 0, 0, 0]);
    checksum_fix(&mut bytes[..20], 8);
    checksum_fix(&mut bytes, 32);
    bytes
}

pub fn rsdt_body(tables: &[u32]) -> Vec<u8> {
    tables.iter().flat_map(|address| address.to_le_bytes()).collect()
}

pub fn xsdt_body(tables: &[u64]) -> Vec<u8> {
    tables.iter().flat_map(|address| address.to_le_bytes()).collect()
}

pub fn madt_body(local_apic: u32, flags: u32, entries: &[Vec<u8>]) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&local_apic.to_le_bytes());
    body.extend_from_slice(&flags.to_le_bytes());
    for entry in entries {
        body.extend_from_slice(entry);
    }
    body
}

pub fn lapic(processor_id: u8, apic_id: u8, flags: u32) -> Vec<u8> {
    let mut entry = vec![0, 8, processor_id, apic_id];
    entry.extend_from_slice(&flags.to_le_bytes());
    entry
}

pub fn x2apic(apic_id: u32, flags: u32, uid: u32) -> Vec<u8> {
    let mut entry = vec![9, 16, 0, 0];
    entry.extend_from_slice(&apic_id.to_le_bytes());
    entry.extend_from_slice(&flags.to_le_bytes());
    entry.extend_from_slice(&uid.to_le_bytes());
    entry
}

pub fn ioapic(id: u8, address: u32, gsi_base: u32) -> Vec<u8> {
    let mut entry = vec![1, 12, id, 0];
    entry.extend_from_slice(&address.to_le_bytes());
    entry.extend_from_slice(&gsi_base.to_le_bytes());
    entry
}

pub fn iso(bus: u8, irq: u8, gsi: u32, flags: u16) -> Vec<u8> {
    let mut entry = vec![2, 10, bus, irq];
    entry.extend_from_slice(&gsi.to_le_bytes());
    entry.extend_from_slice(&flags.to_le_bytes());
    entry
}

pub fn nmi_source(flags: u16, gsi: u32) -> Vec<u8> {
    let mut entry = vec![3, 8];
    entry.extend_from_slice(&flags.to_le_bytes());
    entry.extend_from_slice(&gsi.to_le_bytes());
    entry
}

pub fn lapic_nmi(processor_id: u8, flags: u16, lint: u8) -> Vec<u8> {
    let mut entry = vec![4, 6, processor_id];
    entry.extend_from_slice(&flags.to_le_bytes());
    entry.push(lint);
    entry
}

pub fn x2apic_nmi(flags: u16, uid: u32, lint: u8) -> Vec<u8> {
    let mut entry = vec![10, 12];
    entry.extend_from_slice(&flags.to_le_bytes());
    entry.extend_from_slice(&uid.to_le_bytes());
    entry.extend_from_slice(&[lint, 0, 0, 0]);
    entry
}

pub fn lapic_address_override(address: u64) -> Vec<u8> {
    let mut entry = vec![5, 12, 0, 0];
    entry.extend_from_slice(&address.to_le_bytes());
    entry
}

pub fn mcfg_body(windows: &[(u64, u16, u8, u8)]) -> Vec<u8> {
    let mut body = vec![0u8; 8];
    for &(base, segment, start, end) in windows {
        body.extend_from_slice(&base.to_le_bytes());
        body.extend_from_slice(&segment.to_le_bytes());
        body.push(start);
        body.push(end);
        body.extend_from_slice(&[0; 4]);
    }
    body
}

/// What QEMU's `pc`/`q35` MADT carries for `cpus` CPUs: xAPIC entries, one
/// I/O APIC at 0xFEC00000, IRQ0 -> GSI2, IRQs 5/9/10/11 level active-high,
/// and LINT1 NMI for all processors.
pub fn qemu_madt(cpus: u8) -> Vec<u8> {
    let mut entries: Vec<Vec<u8>> = (0..cpus).map(|cpu| lapic(cpu, cpu, 1)).collect();
    entries.push(ioapic(0, 0xFEC0_0000, 0));
    entries.push(iso(0, 0, 2, 0));
    for irq in [5, 9, 10, 11] {
        entries.push(iso(0, irq, u32::from(irq), 0x000D));
    }
    entries.push(lapic_nmi(0xFF, 0, 1));
    sdt(b"APIC", 1, &madt_body(0xFEE0_0000, 1, &entries))
}

/// Addresses used by [`firmware`].
pub const RSDP_AT: u64 = 0xF_5A40;
pub const EBDA_AT: u64 = 0x9_FC00;
pub const RSDT_AT: u64 = 0x7FE_0000;
pub const XSDT_AT: u64 = 0x7FE_0100;
pub const MADT_AT: u64 = 0x7FE_1000;
pub const MCFG_AT: u64 = 0x7FE_2000;
pub const FACP_AT: u64 = 0x7FE_3000;

/// A QEMU-like firmware image: BDA with an EBDA pointer, EBDA, BIOS area
/// with an ACPI 2.0 RSDP, RSDT + XSDT listing FACP, APIC and (for q35) MCFG.
pub fn firmware(madt: Vec<u8>, mcfg: Option<Vec<u8>>) -> FakePhys {
    let mut memory = FakePhys::new();
    let mut low = vec![0u8; 0x500];
    low[0x40E..0x410].copy_from_slice(&((EBDA_AT >> 4) as u16).to_le_bytes());
    memory.place(0, low);
    memory.place(EBDA_AT, vec![0u8; 0x400]);
    let mut bios = vec![0u8; 0x2_0000];
    let rsdp = rsdp_v2(RSDT_AT as u32, XSDT_AT);
    let at = (RSDP_AT - 0xE_0000) as usize;
    bios[at..at + rsdp.len()].copy_from_slice(&rsdp);
    memory.place(0xE_0000, bios);
    let mut tables32 = vec![FACP_AT as u32, MADT_AT as u32];
    let mut tables64 = vec![FACP_AT, MADT_AT];
    if let Some(mcfg) = mcfg {
        tables32.push(MCFG_AT as u32);
        tables64.push(MCFG_AT);
        memory.place(MCFG_AT, mcfg);
    }
    memory.place(RSDT_AT, sdt(b"RSDT", 1, &rsdt_body(&tables32)));
    memory.place(XSDT_AT, sdt(b"XSDT", 1, &xsdt_body(&tables64)));
    memory.place(MADT_AT, madt);
    memory.place(FACP_AT, sdt(b"FACP", 3, &[0u8; 208]));
    memory
}

// ---------------------------------------------------------------------------------------------
// PCI configuration space

/// One fake function: 64 dwords of configuration space, per-dword writable
/// masks (BARs: the size mask), and a record of protocol violations.
#[derive(Clone, Debug)]
pub struct FakeFunction {
    pub regs: [u32; 64],
    pub writable: [u32; 64],
}

impl FakeFunction {
    pub fn endpoint(vendor: u16, device: u16, class: u8, subclass: u8) -> FakeFunction {
        let mut function = FakeFunction {
            regs: [0; 64],
            writable: [0; 64],
        };
        function.regs[0] = u32::from(vendor) | u32::from(device) << 16;
        function.regs[2] = u32::from(class) << 24 | u32::from(subclass) << 16 | 0x01;
        function.writable[1] = 0x0000_07FF;
        function.writable[15] = 0x0000_00FF;
        function.writable[4..10].fill(0);
        function
    }

    pub fn bridge(vendor: u16, device: u16, primary: u8, secondary: u8, subordinate: u8) -> FakeFunction {
        let mut function = FakeFunction::endpoint(vendor, device, 0x06, 0x04);
        function.regs[3] = 0x01 << 16;
        function.regs[6] = u32::from(primary) | u32::from(secondary) << 8 | u32::from(subordinate) << 16;
        function
    }

    pub fn prog_if(mut self, prog_if: u8) -> FakeFunction {
        self.regs[2] = (self.regs[2] & !0xFF00) | u32::from(prog_if) << 8;
        self
    }

    pub fn multifunction(mut self) -> FakeFunction {
        self.regs[3] |= 0x80 << 16;
        self
    }

    pub fn header_type(mut self, header_type: u8) -> FakeFunction {
        self.regs[3] = (self.regs[3] & !(0x7F << 16)) | u32::from(header_type) << 16;
        self
    }

    pub fn command(mut self, command: u16) -> FakeFunction {
        self.regs[1] = (self.regs[1] & 0xFFFF_0000) | u32::from(command);
        self
    }

    pub fn status(mut self, status: u16) -> FakeFunction {
        self.regs[1] = (self.regs[1] & 0xFFFF) | u32::from(status) << 16;
        self
    }

    pub fn interrupt(mut self, pin: u8, line: u8) -> FakeFunction {
        self.regs[15] = u32::from(pin) << 8 | u32::from(line);
        self
    }

    pub fn subsystem(mut self, vendor: u16, device: u16) -> FakeFunction {
        self.regs[11] = u32::from(vendor) | u32::from(device) << 16;
        self
    }

    pub fn bar_mem32(mut self, slot: usize, address: u32, size: u32, prefetchable: bool) -> FakeFunction {
        let flags = if prefetchable { 0b1000 } else { 0 };
        self.regs[4 + slot] = address | flags;
        self.writable[4 + slot] = !(size - 1) & !0xF;
        self
    }

    pub fn bar_mem64(mut self, slot: usize, address: u64, size: u64, prefetchable: bool) -> FakeFunction {
        let flags = 0b100 | if prefetchable { 0b1000 } else { 0 };
        let mask = !(size - 1) & !0xF;
        self.regs[4 + slot] = address as u32 | flags;
        self.regs[5 + slot] = (address >> 32) as u32;
        self.writable[4 + slot] = mask as u32;
        self.writable[5 + slot] = (mask >> 32) as u32;
        self
    }

    /// An I/O BAR; `decoder16` models devices that only decode 16 address bits.
    pub fn bar_io(mut self, slot: usize, port: u32, size: u32, decoder16: bool) -> FakeFunction {
        self.regs[4 + slot] = port | 1;
        let mut mask = !(size - 1) & !0b11;
        if decoder16 {
            mask &= 0xFFFF;
        }
        self.writable[4 + slot] = mask;
        self
    }

    /// Raw BAR dword with a writable mask (for malformed BARs).
    pub fn bar_raw(mut self, slot: usize, value: u32, writable: u32) -> FakeFunction {
        self.regs[4 + slot] = value;
        self.writable[4 + slot] = writable;
        self
    }

    /// Sets the capability pointer and status bit 4.
    pub fn cap_pointer(mut self, pointer: u8) -> FakeFunction {
        self.regs[13] = u32::from(pointer);
        self.regs[1] |= 1 << 20;
        self
    }

    /// Writes a capability header and body dwords at `offset`; body dwords
    /// are writable where `writable` says so.
    pub fn capability(mut self, offset: u8, id: u8, next: u8, control: u16, body: &[(u32, u32)]) -> FakeFunction {
        let index = usize::from(offset) / 4;
        self.regs[index] = u32::from(id) | u32::from(next) << 8 | u32::from(control) << 16;
        for (position, &(value, writable)) in body.iter().enumerate() {
            self.regs[index + 1 + position] = value;
            self.writable[index + 1 + position] = writable;
        }
        self
    }

    /// Makes the control half of the capability header at `offset` writable in `bits`.
    pub fn control_writable(mut self, offset: u8, bits: u16) -> FakeFunction {
        self.writable[usize::from(offset) / 4] |= u32::from(bits) << 16;
        self
    }
}

/// Fake configuration space. Records BAR probes made while decoding was
/// enabled (a protocol violation) and every write.
#[derive(Default)]
pub struct FakeConfig {
    pub functions: RefCell<BTreeMap<PciAddress, FakeFunction>>,
    pub probes_with_decode_on: Cell<usize>,
    pub writes: RefCell<Vec<(PciAddress, u16, u32)>>,
    pub reads: Cell<usize>,
}

impl FakeConfig {
    pub fn new() -> FakeConfig {
        FakeConfig::default()
    }

    pub fn add(&self, bus: u8, device: u8, function: u8, fake: FakeFunction) -> &FakeConfig {
        self.functions
            .borrow_mut()
            .insert(PciAddress::new(0, bus, device, function), fake);
        self
    }

    /// Like [`FakeConfig::add`], in segment `segment`.
    pub fn add_at(&self, segment: u16, bus: u8, device: u8, function: u8, fake: FakeFunction) -> &FakeConfig {
        self.functions
            .borrow_mut()
            .insert(PciAddress::new(segment, bus, device, function), fake);
        self
    }

    pub fn reg(&self, address: PciAddress, offset: u16) -> u32 {
        self.functions.borrow()[&address].regs[usize::from(offset / 4)]
    }

    pub fn set_reg(&self, address: PciAddress, offset: u16, value: u32) {
        self.functions.borrow_mut().get_mut(&address).unwrap().regs[usize::from(offset / 4)] = value;
    }
}

impl ConfigRegionAccess for FakeConfig {
    unsafe fn read(&self, address: PciAddress, offset: u16) -> u32 {
        self.reads.set(self.reads.get() + 1);
        assert!(offset.is_multiple_of(4) && offset < 256, "bad offset {offset:#x}");
        self.functions
            .borrow()
            .get(&address)
            .map_or(u32::MAX, |function| function.regs[usize::from(offset / 4)])
    }

    unsafe fn write(&self, address: PciAddress, offset: u16, value: u32) {
        assert!(offset.is_multiple_of(4) && offset < 256, "bad offset {offset:#x}");
        self.writes.borrow_mut().push((address, offset, value));
        let mut functions = self.functions.borrow_mut();
        let Some(function) = functions.get_mut(&address) else {
            return;
        };
        let index = usize::from(offset / 4);
        let header_type = (function.regs[3] >> 16) & 0x7F;
        let bar_dwords = match header_type {
            0 => 4..10,
            1 => 4..6,
            _ => 4..4,
        };
        if bar_dwords.contains(&index) && value == u32::MAX && function.regs[1] & 0b11 != 0 {
            self.probes_with_decode_on.set(self.probes_with_decode_on.get() + 1);
        }
        if index == 1 {
            // Command: low 16 bits writable; status bits 8 and 11..=15 are write-one-to-clear.
            let status = (function.regs[1] >> 16) as u16;
            let cleared = status & !((value >> 16) as u16 & 0xF900);
            function.regs[1] = u32::from(cleared) << 16 | (value & function.writable[1]);
            return;
        }
        let writable = function.writable[index];
        function.regs[index] = (function.regs[index] & !writable) | (value & writable);
    }
}

// ---------------------------------------------------------------------------------------------
// MMIO

/// Plain-memory MMIO region with a write log.
pub struct FakeMmio {
    pub words: RefCell<Vec<u32>>,
    pub writes: RefCell<Vec<(usize, u32)>>,
}

impl FakeMmio {
    pub fn new(len: usize) -> FakeMmio {
        FakeMmio {
            words: RefCell::new(vec![0; len / 4]),
            writes: RefCell::new(Vec::new()),
        }
    }
}

impl Mmio32 for FakeMmio {
    fn region_len(&self) -> usize {
        self.words.borrow().len() * 4
    }

    fn read32(&self, offset: usize) -> platform::Result<u32> {
        check_access(offset, 4, self.region_len())?;
        Ok(self.words.borrow()[offset / 4])
    }

    fn write32(&self, offset: usize, value: u32) -> platform::Result<()> {
        check_access(offset, 4, self.region_len())?;
        self.writes.borrow_mut().push((offset, value));
        self.words.borrow_mut()[offset / 4] = value;
        Ok(())
    }
}
