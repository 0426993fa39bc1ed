//! MCFG parsing: PCI Express ECAM windows.

use ::acpi::mcfg::McfgEntry;
use alloc::vec::Vec;
use core::mem::size_of;

use super::{PhysMemory, Sdt, read_plain};
use crate::error::{Error, Result, TableSignature};

/// Most ECAM windows accepted: far above any real machine (a 2-socket server
/// lists one to a few dozen: one per segment or per root complex), low enough
/// that a corrupt length cannot make the parser allocate without bound.
pub const MAX_ECAM_WINDOWS: usize = 1024;
/// Header (36) + 8 reserved bytes.
const MCFG_FIXED_LEN: u32 = 44;
const ENTRY_LEN: u32 = size_of::<McfgEntry>() as u32;
const _: () = assert!(ENTRY_LEN == 16);

/// One ECAM window: configuration space of `segment`, buses `bus_start..=bus_end`.
///
/// `base` is the address of bus 0 of the segment, as Linux reads it: bus `b`
/// lives at `base + (b << 20)` even when `bus_start` is not 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EcamWindow {
    /// Physical address corresponding to bus 0 of the segment.
    pub base: u64,
    /// PCI segment group.
    pub segment: u16,
    /// First bus decoded.
    pub bus_start: u8,
    /// Last bus decoded (>= `bus_start`).
    pub bus_end: u8,
}

/// x86-64 physical addresses have at most 52 bits; nothing decodes above.
pub const PHYS_ADDRESS_LIMIT: u64 = 1 << 52;

impl EcamWindow {
    /// The decoded physical range `[base + (bus_start << 20), base + ((bus_end + 1) << 20))`,
    /// or [`Error::McfgWindowAddress`] when it would pass [`PHYS_ADDRESS_LIMIT`]
    /// (or wrap past 2^64), or the bus range is reversed. `index` in the error is 0.
    pub fn region(&self) -> Result<core::ops::Range<u64>> {
        let error = Error::McfgWindowAddress {
            index: 0,
            base: self.base,
            bus_start: self.bus_start,
            bus_end: self.bus_end,
        };
        if self.bus_start > self.bus_end {
            return Err(error);
        }
        let start = self.base.checked_add(u64::from(self.bus_start) << 20);
        let end = self.base.checked_add((u64::from(self.bus_end) + 1) << 20);
        match (start, end) {
            (Some(start), Some(end)) if end <= PHYS_ADDRESS_LIMIT => Ok(start..end),
            _ => Err(error),
        }
    }

    /// Physical address of the first decoded byte (bus `bus_start`).
    /// Windows from [`Mcfg::parse`] are checked ([`EcamWindow::region`]); for a
    /// hand-made window that fails that check this saturates at `u64::MAX`
    /// instead of wrapping to a low address.
    pub fn region_base(&self) -> u64 {
        self.base.saturating_add(u64::from(self.bus_start) << 20)
    }

    /// Bytes decoded: 1 MiB per bus (0 for a reversed bus range).
    pub fn region_len(&self) -> u64 {
        (u64::from(self.bus_end) + 1).saturating_sub(u64::from(self.bus_start)) << 20
    }
}

/// The parsed MCFG.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mcfg {
    /// ECAM windows in table order (every segment, every entry).
    pub windows: Vec<EcamWindow>,
}

impl Mcfg {
    /// Parses a validated MCFG; a trailing partial entry or a reversed bus range is an error.
    pub fn parse(memory: &impl PhysMemory, table: &Sdt) -> Result<Mcfg> {
        table.expect(TableSignature::MCFG, MCFG_FIXED_LEN)?;
        let payload = table.length.saturating_sub(MCFG_FIXED_LEN);
        if !payload.is_multiple_of(ENTRY_LEN) {
            return Err(Error::McfgPartialEntry { length: table.length });
        }
        let count = usize::try_from(payload / ENTRY_LEN).unwrap_or(usize::MAX);
        if count > MAX_ECAM_WINDOWS {
            return Err(Error::McfgCapacity {
                capacity: MAX_ECAM_WINDOWS,
            });
        }
        let mut windows = Vec::with_capacity(count);
        for index in 0..count {
            let mut bytes = [0u8; ENTRY_LEN as usize];
            // `index < count <= MAX_ECAM_WINDOWS`: the offset fits.
            let offset = u32::try_from(index)
                .ok()
                .and_then(|index| index.checked_mul(ENTRY_LEN))
                .and_then(|offset| offset.checked_add(MCFG_FIXED_LEN))
                .ok_or(Error::McfgCapacity {
                    capacity: MAX_ECAM_WINDOWS,
                })?;
            table.read(memory, offset, &mut bytes)?;
            // Cannot fail: the buffer is exactly one entry.
            let Some(entry) = read_plain::<McfgEntry>(&bytes) else {
                return Err(Error::McfgPartialEntry { length: table.length });
            };
            let (start, end) = (entry.bus_number_start, entry.bus_number_end);
            if start > end {
                return Err(Error::McfgBusRange { index, start, end });
            }
            let window = EcamWindow {
                base: entry.base_address,
                segment: entry.pci_segment_group,
                bus_start: start,
                bus_end: end,
            };
            // A base near 2^64 would make `region_base()` wrap (ECAM mapped at 0).
            if window.region().is_err() {
                return Err(Error::McfgWindowAddress {
                    index,
                    base: window.base,
                    bus_start: start,
                    bus_end: end,
                });
            }
            windows.push(window);
        }
        Ok(Mcfg { windows })
    }
}
