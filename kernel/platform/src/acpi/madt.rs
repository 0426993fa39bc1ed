//! MADT ("APIC") parsing: CPUs, I/O APICs, overrides, NMI wiring.
//!
//! The lists are sized from the table (heap vectors): a 2-socket server lists
//! hundreds of x2APIC entries, nine or more I/O APICs and often one LAPIC-NMI
//! entry per CPU, so no fixed cap applies. The kernel parses the MADT after
//! its heap is up. Every entry's length is still checked before it is read,
//! and the table length is capped by [`super::MAX_TABLE_LEN`], which bounds
//! the memory a malformed table can make the parser allocate.

use ::acpi::madt::{
    EntryHeader, InterruptSourceOverrideEntry, IoApicEntry, LocalApicAddressOverrideEntry, LocalApicEntry,
    LocalApicNmiEntry, LocalX2ApicEntry, NmiSourceEntry, X2ApicNmiEntry,
};
use alloc::collections::BTreeSet;
use alloc::vec::Vec;
use core::mem::size_of;

use super::{PhysMemory, Sdt, read_plain};
use crate::error::{Error, Result, TableSignature};

/// Header (36) + local APIC address (4) + flags (4).
const MADT_FIXED_LEN: u32 = 44;

const TYPE_LOCAL_APIC: u8 = 0;
const TYPE_IO_APIC: u8 = 1;
const TYPE_OVERRIDE: u8 = 2;
const TYPE_NMI_SOURCE: u8 = 3;
const TYPE_LOCAL_APIC_NMI: u8 = 4;
const TYPE_LOCAL_APIC_ADDRESS: u8 = 5;
const TYPE_LOCAL_X2APIC: u8 = 9;
const TYPE_X2APIC_NMI: u8 = 10;

/// Smallest valid length of an entry of `entry_type` (2 for unknown types: header only).
fn min_entry_len(entry_type: u8) -> u8 {
    let size = match entry_type {
        TYPE_LOCAL_APIC => size_of::<LocalApicEntry>(),
        TYPE_IO_APIC => size_of::<IoApicEntry>(),
        TYPE_OVERRIDE => size_of::<InterruptSourceOverrideEntry>(),
        TYPE_NMI_SOURCE => size_of::<NmiSourceEntry>(),
        TYPE_LOCAL_APIC_NMI => size_of::<LocalApicNmiEntry>(),
        TYPE_LOCAL_APIC_ADDRESS => size_of::<LocalApicAddressOverrideEntry>(),
        TYPE_LOCAL_X2APIC => size_of::<LocalX2ApicEntry>(),
        TYPE_X2APIC_NMI => size_of::<X2ApicNmiEntry>(),
        _ => size_of::<EntryHeader>(),
    };
    size as u8
}

/// Interrupt polarity from MPS INTI flags bits 0..=1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Polarity {
    /// 0b00: as the bus specifies (ISA: active high; PCI: active low).
    Conforming,
    /// 0b01.
    ActiveHigh,
    /// 0b11.
    ActiveLow,
    /// 0b10, reserved; treated as conforming when routing.
    Reserved,
}

/// Trigger mode from MPS INTI flags bits 2..=3.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// 0b00: as the bus specifies (ISA: edge; PCI: level).
    Conforming,
    /// 0b01.
    Edge,
    /// 0b11.
    Level,
    /// 0b10, reserved; treated as conforming when routing.
    Reserved,
}

fn decode_flags(flags: u16) -> (Polarity, Trigger) {
    let polarity = match flags & 0b11 {
        0b00 => Polarity::Conforming,
        0b01 => Polarity::ActiveHigh,
        0b11 => Polarity::ActiveLow,
        _ => Polarity::Reserved,
    };
    let trigger = match (flags >> 2) & 0b11 {
        0b00 => Trigger::Conforming,
        0b01 => Trigger::Edge,
        0b11 => Trigger::Level,
        _ => Trigger::Reserved,
    };
    (polarity, trigger)
}

/// One processor the firmware lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cpu {
    /// ACPI processor UID (the xAPIC entry's 8-bit processor id, widened).
    pub processor_uid: u32,
    /// Local APIC id (8-bit for xAPIC entries, 32-bit for x2APIC entries).
    pub apic_id: u32,
    /// Flags bit 0: the processor is ready to use.
    pub enabled: bool,
    /// Flags bit 1: disabled now but may be brought online.
    pub online_capable: bool,
    /// Listed by an x2APIC entry (type 9) rather than a local APIC entry (type 0).
    pub from_x2apic_entry: bool,
}

impl Cpu {
    /// Whether the kernel should try to start it (enabled or online-capable).
    pub fn usable(&self) -> bool {
        self.enabled || self.online_capable
    }
}

/// One I/O APIC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IoApic {
    /// I/O APIC id.
    pub id: u8,
    /// Physical MMIO address of its register window.
    pub address: u32,
    /// First global system interrupt its pins serve.
    pub gsi_base: u32,
}

/// An ISA IRQ wired to a different GSI or with non-ISA polarity/trigger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InterruptOverride {
    /// ISA IRQ (bus-relative source).
    pub isa_irq: u8,
    /// Global system interrupt it arrives on.
    pub gsi: u32,
    /// Polarity.
    pub polarity: Polarity,
    /// Trigger mode.
    pub trigger: Trigger,
}

/// A GSI wired to NMI.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NmiSource {
    /// Global system interrupt.
    pub gsi: u32,
    /// Polarity.
    pub polarity: Polarity,
    /// Trigger mode.
    pub trigger: Trigger,
}

/// A local APIC LINT pin wired to NMI.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalApicNmi {
    /// Processor UID, `None` for "all processors" (0xFF / 0xFFFF_FFFF).
    pub processor_uid: Option<u32>,
    /// LINT pin number (0 or 1).
    pub lint: u8,
    /// Polarity.
    pub polarity: Polarity,
    /// Trigger mode.
    pub trigger: Trigger,
}

/// A resolved route: GSI plus concrete polarity and trigger for the I/O APIC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IrqRoute {
    /// Global system interrupt.
    pub gsi: u32,
    /// `true` for active-low.
    pub active_low: bool,
    /// `true` for level-triggered.
    pub level: bool,
}

/// The parsed MADT.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Madt {
    /// Local APIC physical address, after any 64-bit override (type 5).
    pub local_apic_address: u64,
    /// Flags bit 0: a dual 8259 PIC is present (mask it before enabling interrupts).
    pub pcat_compat: bool,
    /// Processors in table order. A usable (enabled or online-capable) entry
    /// whose APIC id a usable entry already listed is dropped; disabled
    /// entries are kept as listed (firmware often repeats one placeholder id
    /// for absent sockets) and never hide a later usable entry.
    pub cpus: Vec<Cpu>,
    /// Usable entries dropped because a usable entry already had their APIC id.
    pub duplicate_apic_ids: u32,
    /// I/O APICs in table order.
    pub io_apics: Vec<IoApic>,
    /// Interrupt source overrides.
    pub overrides: Vec<InterruptOverride>,
    /// NMI sources.
    pub nmi_sources: Vec<NmiSource>,
    /// Local APIC NMI pins (type 4 and type 10 entries), collapsed: exact
    /// repeats are dropped, per-processor entries that an "all processors"
    /// entry with the same pin and flags already covers are dropped, and a set
    /// of per-processor entries with one pin and flags that names every
    /// usable CPU becomes a single "all processors" entry.
    pub local_apic_nmis: Vec<LocalApicNmi>,
    /// Type 4 and type 10 entries as listed, before collapsing.
    pub local_apic_nmi_entries: u32,
    /// Entries of other types (skipped).
    pub other_entries: u32,
}

impl Madt {
    /// Parses a validated MADT. Every entry's length is checked against the
    /// table end and against its type's size before it is read.
    pub fn parse(memory: &impl PhysMemory, table: &Sdt) -> Result<Madt> {
        table.expect(TableSignature::MADT, MADT_FIXED_LEN)?;
        let mut madt = Madt {
            local_apic_address: u64::from(table.read_u32(memory, 36)?),
            pcat_compat: table.read_u32(memory, 40)? & 1 != 0,
            cpus: Vec::new(),
            duplicate_apic_ids: 0,
            io_apics: Vec::new(),
            overrides: Vec::new(),
            nmi_sources: Vec::new(),
            local_apic_nmis: Vec::new(),
            local_apic_nmi_entries: 0,
            other_entries: 0,
        };
        let mut usable_ids = BTreeSet::new();
        let mut offset = MADT_FIXED_LEN;
        let mut entry = [0u8; 255];
        while offset < table.length {
            let mut header = [0u8; 2];
            table.read(memory, offset, &mut header)?;
            let [entry_type, length] = header;
            let min = min_entry_len(entry_type);
            if length < min {
                return Err(Error::MadtEntryTooShort {
                    offset,
                    entry_type,
                    length,
                    min,
                });
            }
            // `offset < table.length`: the difference does not wrap.
            if u32::from(length) > table.length - offset {
                return Err(Error::MadtEntryOverrun {
                    offset,
                    entry_type,
                    length,
                    table_length: table.length,
                });
            }
            let bytes = &mut entry[..usize::from(length)];
            table.read(memory, offset, bytes)?;
            madt.add_entry(offset, entry_type, bytes, &mut usable_ids)?;
            // length >= 2 was checked above, so the walk always advances; and
            // `offset + length <= table.length`, so it does not wrap.
            offset += u32::from(length);
        }
        madt.collapse_local_apic_nmis();
        Ok(madt)
    }

    fn add_cpu(&mut self, cpu: Cpu, usable_ids: &mut BTreeSet<u32>) -> Result<()> {
        if cpu.usable() && !usable_ids.insert(cpu.apic_id) {
            self.duplicate_apic_ids = self.duplicate_apic_ids.saturating_add(1);
            return Ok(());
        }
        self.cpus.push(cpu);
        Ok(())
    }

    /// See [`Madt::local_apic_nmis`]. Firmware that lists one entry per CPU
    /// (all saying "LINT1 is NMI") ends up with one entry. Entries are
    /// grouped by pin and flags (a handful of groups), so this stays linear
    /// in the entry count apart from set look-ups.
    fn collapse_local_apic_nmis(&mut self) {
        struct Group {
            pin: LocalApicNmi,
            for_all: bool,
            uids: Vec<u32>,
            seen: BTreeSet<u32>,
        }
        let same_pin =
            |a: &LocalApicNmi, b: &LocalApicNmi| a.lint == b.lint && a.polarity == b.polarity && a.trigger == b.trigger;
        let mut groups: Vec<Group> = Vec::new();
        for entry in core::mem::take(&mut self.local_apic_nmis) {
            let index = match groups.iter().position(|group| same_pin(&group.pin, &entry)) {
                Some(index) => index,
                None => {
                    groups.push(Group {
                        pin: entry,
                        for_all: false,
                        uids: Vec::new(),
                        seen: BTreeSet::new(),
                    });
                    groups.len() - 1
                }
            };
            let group = &mut groups[index];
            match entry.processor_uid {
                None => group.for_all = true,
                Some(uid) => {
                    if group.seen.insert(uid) {
                        group.uids.push(uid);
                    }
                }
            }
        }
        let usable_uids: BTreeSet<u32> = self.usable_cpus().map(|cpu| cpu.processor_uid).collect();
        for group in groups {
            let names_every_cpu = !usable_uids.is_empty() && usable_uids.is_subset(&group.seen);
            if group.for_all || names_every_cpu {
                self.local_apic_nmis.push(LocalApicNmi {
                    processor_uid: None,
                    ..group.pin
                });
            } else {
                for uid in group.uids {
                    self.local_apic_nmis.push(LocalApicNmi {
                        processor_uid: Some(uid),
                        ..group.pin
                    });
                }
            }
        }
    }

    /// The LINT pins wired to NMI on the processor with ACPI UID `processor_uid`.
    pub fn nmi_pins_of(&self, processor_uid: u32) -> impl Iterator<Item = &LocalApicNmi> {
        self.local_apic_nmis
            .iter()
            .filter(move |entry| entry.processor_uid.is_none_or(|uid| uid == processor_uid))
    }

    /// `bytes` holds the whole entry and is at least `min_entry_len` long, so
    /// the `read_plain` calls cannot fail; they are still checked.
    fn add_entry(&mut self, offset: u32, entry_type: u8, bytes: &[u8], usable_ids: &mut BTreeSet<u32>) -> Result<()> {
        let short = || Error::MadtEntryTooShort {
            offset,
            entry_type,
            length: u8::try_from(bytes.len()).unwrap_or(u8::MAX),
            min: min_entry_len(entry_type),
        };
        match entry_type {
            TYPE_LOCAL_APIC => {
                let entry: LocalApicEntry = read_plain(bytes).ok_or_else(short)?;
                let flags = entry.flags;
                self.add_cpu(
                    Cpu {
                        processor_uid: u32::from(entry.processor_id),
                        apic_id: u32::from(entry.apic_id),
                        enabled: flags & 1 != 0,
                        online_capable: flags & 2 != 0,
                        from_x2apic_entry: false,
                    },
                    usable_ids,
                )
            }
            TYPE_LOCAL_X2APIC => {
                let entry: LocalX2ApicEntry = read_plain(bytes).ok_or_else(short)?;
                let flags = entry.flags;
                self.add_cpu(
                    Cpu {
                        processor_uid: entry.processor_uid,
                        apic_id: entry.x2apic_id,
                        enabled: flags & 1 != 0,
                        online_capable: flags & 2 != 0,
                        from_x2apic_entry: true,
                    },
                    usable_ids,
                )
            }
            TYPE_IO_APIC => {
                let entry: IoApicEntry = read_plain(bytes).ok_or_else(short)?;
                let io_apic = IoApic {
                    id: entry.io_apic_id,
                    address: entry.io_apic_address,
                    gsi_base: entry.global_system_interrupt_base,
                };
                self.io_apics.push(io_apic);
                Ok(())
            }
            TYPE_OVERRIDE => {
                let entry: InterruptSourceOverrideEntry = read_plain(bytes).ok_or_else(short)?;
                if entry.bus != 0 {
                    return Err(Error::MadtOverrideBus {
                        bus: entry.bus,
                        irq: entry.irq,
                    });
                }
                let (polarity, trigger) = decode_flags(entry.flags);
                let item = InterruptOverride {
                    isa_irq: entry.irq,
                    gsi: entry.global_system_interrupt,
                    polarity,
                    trigger,
                };
                self.overrides.push(item);
                Ok(())
            }
            TYPE_NMI_SOURCE => {
                let entry: NmiSourceEntry = read_plain(bytes).ok_or_else(short)?;
                let (polarity, trigger) = decode_flags(entry.flags);
                let item = NmiSource {
                    gsi: entry.global_system_interrupt,
                    polarity,
                    trigger,
                };
                self.nmi_sources.push(item);
                Ok(())
            }
            TYPE_LOCAL_APIC_NMI => {
                let entry: LocalApicNmiEntry = read_plain(bytes).ok_or_else(short)?;
                let (polarity, trigger) = decode_flags(entry.flags);
                let processor_uid = (entry.processor_id != 0xFF).then_some(u32::from(entry.processor_id));
                let item = LocalApicNmi {
                    processor_uid,
                    lint: entry.nmi_line,
                    polarity,
                    trigger,
                };
                self.local_apic_nmi_entries = self.local_apic_nmi_entries.saturating_add(1);
                self.local_apic_nmis.push(item);
                Ok(())
            }
            TYPE_X2APIC_NMI => {
                let entry: X2ApicNmiEntry = read_plain(bytes).ok_or_else(short)?;
                let (polarity, trigger) = decode_flags(entry.flags);
                let uid = entry.processor_uid;
                let processor_uid = (uid != u32::MAX).then_some(uid);
                let item = LocalApicNmi {
                    processor_uid,
                    lint: entry.nmi_line,
                    polarity,
                    trigger,
                };
                self.local_apic_nmi_entries = self.local_apic_nmi_entries.saturating_add(1);
                self.local_apic_nmis.push(item);
                Ok(())
            }
            TYPE_LOCAL_APIC_ADDRESS => {
                let entry: LocalApicAddressOverrideEntry = read_plain(bytes).ok_or_else(short)?;
                self.local_apic_address = entry.local_apic_address;
                Ok(())
            }
            _ => {
                self.other_entries = self.other_entries.saturating_add(1);
                Ok(())
            }
        }
    }

    /// Processors the kernel should start (enabled or online-capable), in table order.
    pub fn usable_cpus(&self) -> impl Iterator<Item = &Cpu> {
        self.cpus.iter().filter(|cpu| cpu.usable())
    }

    /// Route of ISA IRQ `irq`: its override if any, otherwise GSI = IRQ;
    /// conforming/reserved flags resolve to the ISA default (active high, edge).
    pub fn isa_irq_route(&self, irq: u8) -> IrqRoute {
        self.route_with_defaults(irq, false, false)
    }

    /// Route of a PCI function's firmware-assigned interrupt line (INTx): an
    /// override for that IRQ if any (QEMU marks 5, 9, 10, 11 level/high),
    /// otherwise GSI = line; conforming flags resolve to the PCI default
    /// (active low, level).
    pub fn pci_line_route(&self, line: u8) -> IrqRoute {
        self.route_with_defaults(line, true, true)
    }

    fn route_with_defaults(&self, irq: u8, default_low: bool, default_level: bool) -> IrqRoute {
        match self.overrides.iter().find(|entry| entry.isa_irq == irq) {
            Some(entry) => IrqRoute {
                gsi: entry.gsi,
                active_low: match entry.polarity {
                    Polarity::ActiveHigh => false,
                    Polarity::ActiveLow => true,
                    Polarity::Conforming | Polarity::Reserved => default_low,
                },
                level: match entry.trigger {
                    Trigger::Edge => false,
                    Trigger::Level => true,
                    Trigger::Conforming | Trigger::Reserved => default_level,
                },
            },
            None => IrqRoute {
                gsi: u32::from(irq),
                active_low: default_low,
                level: default_level,
            },
        }
    }

    /// The I/O APIC whose GSI range starts at or below `gsi`, closest first,
    /// with the pin number `gsi - gsi_base`. The caller checks the pin
    /// against the I/O APIC's redirection entry count (a hardware register).
    pub fn io_apic_for_gsi(&self, gsi: u32) -> Result<(&IoApic, u32)> {
        self.io_apics
            .iter()
            .filter(|io_apic| io_apic.gsi_base <= gsi)
            .max_by_key(|io_apic| io_apic.gsi_base)
            .map(|io_apic| (io_apic, gsi - io_apic.gsi_base))
            .ok_or(Error::NoIoApicForGsi { gsi })
    }
}
