//! SRAT (System Resource Affinity Table): which proximity domain each CPU
//! and each memory range belongs to.

use alloc::vec::Vec;

use super::tables::{EntryHeader, Fields, entries, table_bytes};
use super::{PhysMemory, Sdt};
use crate::error::{Result, TableSignature};

/// Header (36) + reserved u32 (table revision 1 marker) + reserved u64.
const SRAT_FIXED_LEN: u32 = 48;
const TYPE_LOCAL_APIC_AFFINITY: u16 = 0;
const TYPE_MEMORY_AFFINITY: u16 = 1;
const TYPE_X2APIC_AFFINITY: u16 = 2;

/// A CPU's proximity domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuAffinity {
    pub apic_id: u32,
    pub proximity_domain: u32,
    /// Flags bit 0; disabled entries are ignored by [`super::NumaTopology`].
    pub enabled: bool,
    /// From an x2APIC affinity entry (type 2).
    pub from_x2apic_entry: bool,
}

/// A memory range's proximity domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryAffinity {
    pub base: u64,
    pub length: u64,
    pub proximity_domain: u32,
    pub enabled: bool,
    pub hot_pluggable: bool,
    pub non_volatile: bool,
}

impl MemoryAffinity {
    /// `base + length`, saturating (a garbage length must not wrap to a low address).
    pub fn end(&self) -> u64 {
        self.base.saturating_add(self.length)
    }
}

/// The parsed SRAT.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Srat {
    /// Table revision: from 2 on, proximity domains are 32 bits wide; in
    /// revision 1 only their low byte is defined (Linux reads it the same way).
    pub revision: u8,
    pub cpus: Vec<CpuAffinity>,
    pub memory: Vec<MemoryAffinity>,
    /// Entries of other types (GICC, ITS, generic initiators) skipped.
    pub other_entries: u32,
}

fn min_len(entry_type: u16) -> usize {
    match entry_type {
        TYPE_LOCAL_APIC_AFFINITY => 16,
        TYPE_MEMORY_AFFINITY => 40,
        TYPE_X2APIC_AFFINITY => 24,
        _ => 2,
    }
}

impl Srat {
    /// Parses a validated SRAT; entry lengths are checked before any field is read.
    pub fn parse(memory: &impl PhysMemory, table: &Sdt) -> Result<Srat> {
        table.expect(TableSignature::SRAT, SRAT_FIXED_LEN)?;
        let bytes = table_bytes(memory, table)?;
        Self::parse_bytes(table.revision, &bytes)
    }

    fn parse_bytes(revision: u8, bytes: &[u8]) -> Result<Srat> {
        let fields = Fields::new(TableSignature::SRAT, bytes);
        let wide_domains = revision >= 2;
        let mut srat = Srat {
            revision,
            cpus: Vec::new(),
            memory: Vec::new(),
            other_entries: 0,
        };
        for entry in entries(fields, SRAT_FIXED_LEN as usize, EntryHeader::ByteType, min_len)? {
            let e = entry.bytes;
            match entry.entry_type {
                TYPE_LOCAL_APIC_AFFINITY => {
                    let low = u32::from(e.u8(2)?);
                    let high = u32::from(e.u8(9)?) | (u32::from(e.u8(10)?) << 8) | (u32::from(e.u8(11)?) << 16);
                    srat.cpus.push(CpuAffinity {
                        apic_id: u32::from(e.u8(3)?),
                        proximity_domain: if wide_domains { low | (high << 8) } else { low },
                        enabled: e.u32(4)? & 1 != 0,
                        from_x2apic_entry: false,
                    });
                }
                TYPE_MEMORY_AFFINITY => {
                    let domain = e.u32(2)?;
                    let flags = e.u32(28)?;
                    srat.memory.push(MemoryAffinity {
                        base: e.u64(8)?,
                        length: e.u64(16)?,
                        proximity_domain: if wide_domains { domain } else { domain & 0xFF },
                        enabled: flags & 1 != 0,
                        hot_pluggable: flags & 2 != 0,
                        non_volatile: flags & 4 != 0,
                    });
                }
                TYPE_X2APIC_AFFINITY => srat.cpus.push(CpuAffinity {
                    apic_id: e.u32(8)?,
                    proximity_domain: e.u32(4)?,
                    enabled: e.u32(12)? & 1 != 0,
                    from_x2apic_entry: true,
                }),
                _ => srat.other_entries = srat.other_entries.saturating_add(1),
            }
        }
        Ok(srat)
    }
}
