//! IVRS (AMD I/O Virtualization Reporting Structure): the AMD-Vi IOMMUs,
//! plus the control-register bit baremq clears when firmware left one on.

use alloc::vec::Vec;

use super::tables::{EntryHeader, Fields, entries, table_bytes};
use super::{PhysMemory, Sdt};
use crate::error::{Result, TableSignature};

/// Header (36) + IVinfo (4) + reserved (8).
const IVRS_FIXED_LEN: u32 = 48;
/// IVHD types: 0x10 (legacy), 0x11 and 0x40 (with the extended feature register).
const IVHD_TYPES: [u16; 3] = [0x10, 0x11, 0x40];
/// IVMD types: memory definitions for all, one, or a range of devices.
const IVMD_TYPES: [u16; 3] = [0x20, 0x21, 0x22];

/// One AMD IOMMU. Firmware describes each unit once per IVHD type it
/// supports (0x10 and 0x11, say); they are merged into one unit here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AmdIommu {
    pub segment: u16,
    /// The IOMMU's own PCI requester id (bus << 8 | device << 3 | function).
    pub device_id: u16,
    /// Offset of its capability block in its PCI config space.
    pub capability_offset: u16,
    /// Physical address of its MMIO registers.
    pub base: u64,
    /// IVHD types that described it.
    pub block_types: Vec<u8>,
}

/// The parsed IVRS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ivrs {
    pub iv_info: u32,
    pub units: Vec<AmdIommu>,
    pub memory_definitions: u32,
    pub other_blocks: u32,
}

fn min_len(block: u16) -> usize {
    match block {
        0x10 => 24,
        0x11 | 0x40 => 40,
        0x20..=0x22 => 32,
        _ => 4,
    }
}

impl Ivrs {
    /// Parses a validated IVRS; block lengths are checked before reads.
    pub fn parse(memory: &impl PhysMemory, table: &Sdt) -> Result<Ivrs> {
        table.expect(TableSignature::IVRS, IVRS_FIXED_LEN)?;
        let bytes = table_bytes(memory, table)?;
        let fields = Fields::new(TableSignature::IVRS, &bytes);
        let mut ivrs = Ivrs {
            iv_info: fields.u32(36)?,
            units: Vec::new(),
            memory_definitions: 0,
            other_blocks: 0,
        };
        // Unit index by (segment, device id, base): a table of thousands of
        // blocks merges in n log n, not n^2.
        let mut known: alloc::collections::BTreeMap<(u16, u16, u64), usize> = alloc::collections::BTreeMap::new();
        for entry in entries(
            fields,
            IVRS_FIXED_LEN as usize,
            EntryHeader::ByteTypeWordLength,
            min_len,
        )? {
            let e = entry.bytes;
            if IVHD_TYPES.contains(&entry.entry_type) {
                let (segment, device_id, base) = (e.u16(16)?, e.u16(4)?, e.u64(8)?);
                // IVHD types are bytes (0x10, 0x11, 0x40).
                let block_type = u8::try_from(entry.entry_type).unwrap_or(u8::MAX);
                match known.get(&(segment, device_id, base)) {
                    Some(&index) => {
                        if let Some(unit) = ivrs.units.get_mut(index) {
                            unit.block_types.push(block_type);
                        }
                    }
                    None => {
                        known.insert((segment, device_id, base), ivrs.units.len());
                        ivrs.units.push(AmdIommu {
                            segment,
                            device_id,
                            capability_offset: e.u16(6)?,
                            base,
                            block_types: alloc::vec![block_type],
                        });
                    }
                }
            } else if IVMD_TYPES.contains(&entry.entry_type) {
                ivrs.memory_definitions = ivrs.memory_definitions.saturating_add(1);
            } else {
                ivrs.other_blocks = ivrs.other_blocks.saturating_add(1);
            }
        }
        Ok(ivrs)
    }
}

/// AMD-Vi register offsets and bits (AMD IOMMU specification, MMIO registers).
pub mod amdvi {
    /// Control register (64-bit).
    pub const CONTROL: usize = 0x18;
    /// Bit 0: IommuEn.
    pub const IOMMU_ENABLE: u64 = 1 << 0;
    /// Bytes of the register block to map (the first 16 KiB hold the control registers).
    pub const REGISTER_BYTES: usize = 0x4000;
}
