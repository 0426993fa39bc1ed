//! Base address registers: decoding and sizing.

use core::fmt;

use pci_types::{CommandRegister, ConfigRegionAccess, PciAddress};

use super::config::ConfigSpace;
use crate::error::{Error, Result};

/// What a BAR decodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BarKind {
    /// I/O ports.
    Io,
    /// 32-bit memory.
    Memory32,
    /// Legacy memory type 0b01: 32-bit register, must be placed below 1 MiB.
    MemoryBelow1M,
    /// 64-bit memory, this slot and the next.
    Memory64,
}

/// A decoded, sized BAR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bar {
    /// BAR index (the lower slot for a 64-bit BAR).
    pub slot: u8,
    /// Kind.
    pub kind: BarKind,
    /// Base address (port number for I/O BARs).
    pub address: u64,
    /// Size in bytes (a power of two).
    pub size: u64,
    /// Memory BAR marked prefetchable.
    pub prefetchable: bool,
}

impl Bar {
    /// Whether this is a memory BAR (any width).
    pub fn is_memory(&self) -> bool {
        self.kind != BarKind::Io
    }
}

/// The state of one BAR slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BarSlot {
    /// Not implemented (reads back zero after writing all-ones), or not read.
    #[default]
    Unused,
    /// A BAR.
    Bar(Bar),
    /// The upper half of the 64-bit BAR in the previous slot.
    Upper64,
    /// Malformed; the reason is in the function's `problems`.
    Invalid,
}

impl BarSlot {
    /// The BAR in this slot, if any.
    pub fn bar(&self) -> Option<&Bar> {
        match self {
            BarSlot::Bar(bar) => Some(bar),
            _ => None,
        }
    }
}

impl fmt::Display for Bar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            BarKind::Io => "I/O ports",
            BarKind::Memory32 => "32-bit memory",
            BarKind::MemoryBelow1M => "memory below 1M",
            BarKind::Memory64 => "64-bit memory",
        };
        write!(f, "BAR{}: {kind} at {:#x} [size=", self.slot, self.address)?;
        write_size(f, self.size)?;
        write!(f, "]")?;
        if self.prefetchable {
            write!(f, " prefetchable")?;
        }
        Ok(())
    }
}

/// Writes a size as lspci does: 4K, 16M, 2G, or bytes below 1 KiB.
pub(crate) fn write_size(f: &mut fmt::Formatter<'_>, size: u64) -> fmt::Result {
    const UNITS: [(u64, &str); 4] = [(1 << 40, "T"), (1 << 30, "G"), (1 << 20, "M"), (1 << 10, "K")];
    for (unit, suffix) in UNITS {
        if size >= unit && size.is_multiple_of(unit) {
            return write!(f, "{}{suffix}", size / unit);
        }
    }
    write!(f, "{size}")
}

/// Largest BAR accepted: x86-64 physical addresses have 52 bits, so a BAR
/// larger than half of that space (e.g. one sizing to 2^63) can never be placed.
pub const MAX_BAR_SIZE: u64 = crate::acpi::PHYS_ADDRESS_LIMIT / 2;

/// Refuses a memory BAR that is too large or whose assigned range passes the
/// physical address space; placement arithmetic on accepted BARs cannot wrap.
fn check_memory_bar(address: PciAddress, bar: Bar) -> core::result::Result<Bar, Error> {
    if bar.size > MAX_BAR_SIZE {
        return Err(Error::BarTooLarge {
            address,
            slot: bar.slot,
            size: bar.size,
        });
    }
    match bar.address.checked_add(bar.size) {
        Some(end) if end <= crate::acpi::PHYS_ADDRESS_LIMIT => Ok(bar),
        _ => Err(Error::BarAddress {
            address,
            slot: bar.slot,
            base: bar.address,
            size: bar.size,
        }),
    }
}

/// Class and subclass of a host bridge (06/00), as bits 31:16 of dword 0x08.
const HOST_BRIDGE_CLASS: u32 = 0x0600;

/// Lowest set bit: the size a BAR's read-back mask encodes.
fn size_from_mask(mask: u64) -> u64 {
    mask & mask.wrapping_neg()
}

/// Decodes and sizes the first `count` BARs (6 for endpoints, 2 for
/// bridges). While sizing, I/O and memory decoding are switched off in the
/// command register so the all-ones probe never decodes as an address
/// (except on a host bridge, class 06/00, which keeps decoding); the
/// command register and every BAR are restored afterwards. Malformed slots
/// are marked [`BarSlot::Invalid`] and their errors returned beside the slots.
pub fn read_bars<A: ConfigRegionAccess + ?Sized>(
    access: &A,
    address: PciAddress,
    count: u8,
) -> Result<([BarSlot; 6], heapless::Vec<Error, 6>)> {
    let cfg = ConfigSpace::new(access, address);
    let count = count.min(6);
    let mut slots = [BarSlot::Unused; 6];
    let mut problems = heapless::Vec::new();

    let command = cfg.command()?;
    let decode = CommandRegister::IO_ENABLE | CommandRegister::MEMORY_ENABLE;
    // A host bridge keeps decoding: on some chipsets turning it off cuts the
    // CPU off from memory or configuration space (Linux never does it either).
    let class = cfg.read32(0x08)? >> 16;
    let toggle = command.intersects(decode) && class != HOST_BRIDGE_CLASS;
    if toggle {
        cfg.set_command(command - decode)?;
    }
    let result = size_all(&cfg, count, &mut slots, &mut problems);
    if toggle {
        cfg.set_command(command)?;
    }
    result?;
    Ok((slots, problems))
}

fn probe(cfg: &ConfigSpace<'_, impl ConfigRegionAccess + ?Sized>, offset: u16) -> Result<(u32, u32)> {
    let original = cfg.read32(offset)?;
    cfg.write32(offset, u32::MAX)?;
    let readback = cfg.read32(offset)?;
    cfg.write32(offset, original)?;
    Ok((original, readback))
}

fn size_all<A: ConfigRegionAccess + ?Sized>(
    cfg: &ConfigSpace<'_, A>,
    count: u8,
    slots: &mut [BarSlot; 6],
    problems: &mut heapless::Vec<Error, 6>,
) -> Result<()> {
    let address = cfg.address();
    let mut slot = 0u8;
    while slot < count {
        let offset = 0x10 + u16::from(slot) * 4;
        let (original, readback) = probe(cfg, offset)?;
        let index = usize::from(slot);
        if original & 1 == 1 {
            let mut mask = readback & !0b11;
            if mask != 0 && mask >> 16 == 0 {
                // A 16-bit I/O decoder: upper bits read back as zero.
                mask |= 0xFFFF_0000;
            }
            if mask != 0 {
                slots[index] = BarSlot::Bar(Bar {
                    slot,
                    kind: BarKind::Io,
                    address: u64::from(original & !0b11),
                    size: size_from_mask(u64::from(mask)),
                    prefetchable: false,
                });
            }
            slot += 1;
            continue;
        }
        let prefetchable = original & 0b1000 != 0;
        match (original >> 1) & 0b11 {
            kind @ (0b00 | 0b01) => {
                let mask = readback & !0xF;
                if mask != 0 {
                    slots[index] = BarSlot::Bar(Bar {
                        slot,
                        kind: if kind == 0 {
                            BarKind::Memory32
                        } else {
                            BarKind::MemoryBelow1M
                        },
                        address: u64::from(original & !0xF),
                        size: size_from_mask(u64::from(mask)),
                        prefetchable,
                    });
                }
                slot += 1;
            }
            0b10 => {
                if slot + 1 >= count {
                    slots[index] = BarSlot::Invalid;
                    let _ = problems.push(Error::Bar64InLastSlot { address, slot });
                    slot += 1;
                    continue;
                }
                let (original_high, readback_high) = probe(cfg, offset + 4)?;
                let mask = (u64::from(readback_high) << 32 | u64::from(readback)) & !0xF;
                if mask != 0 {
                    let bar = Bar {
                        slot,
                        kind: BarKind::Memory64,
                        address: u64::from(original_high) << 32 | u64::from(original & !0xF),
                        size: size_from_mask(mask),
                        prefetchable,
                    };
                    slots[index] = match check_memory_bar(address, bar) {
                        Ok(bar) => BarSlot::Bar(bar),
                        Err(error) => {
                            let _ = problems.push(error);
                            BarSlot::Invalid
                        }
                    };
                    slots[index + 1] = BarSlot::Upper64;
                }
                slot += 2;
            }
            _ => {
                slots[index] = BarSlot::Invalid;
                let _ = problems.push(Error::BarReservedType {
                    address,
                    slot,
                    raw: original,
                });
                slot += 1;
            }
        }
    }
    Ok(())
}
