//! The Root System Description Pointer: from a Multiboot2 copy, an address,
//! or a scan of the BIOS areas.

use super::{PhysMemory, byte_sum, read_plain};
use crate::error::{Error, Result};

/// Bytes covered by the ACPI 1.0 checksum.
pub const RSDP_V1_LEN: usize = 20;
/// Size of the ACPI 2.0+ structure, covered by the extended checksum.
pub const RSDP_V2_LEN: usize = 36;
const _: () = assert!(core::mem::size_of::<::acpi::rsdp::Rsdp>() == RSDP_V2_LEN);

/// BIOS Data Area word holding the EBDA's real-mode segment.
pub const EBDA_POINTER: u64 = 0x40E;
/// The main BIOS read-only area searched for the RSDP.
pub const BIOS_AREA: core::ops::Range<u64> = 0xE_0000..0x10_0000;
/// Where an EBDA may start (segment values outside are ignored).
const EBDA_RANGE: core::ops::Range<u64> = 0x8_0000..0xA_0000;
const SIGNATURE: [u8; 8] = *b"RSD PTR ";

/// A validated RSDP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rsdp {
    /// Where it was found, when known (a Multiboot2 tag holds a copy).
    pub phys: Option<u64>,
    /// 0 for ACPI 1.0, 2 for ACPI 2.0 and later.
    pub revision: u8,
    /// OEM id bytes.
    pub oem_id: [u8; 6],
    /// Physical address of the RSDT (may be 0 on ACPI 2.0+ systems).
    pub rsdt_address: u32,
    /// Physical address of the XSDT, present from revision 2 on.
    pub xsdt_address: Option<u64>,
}

impl Rsdp {
    /// Validates RSDP bytes, e.g. the copy in Multiboot2 tag 14 (ACPI 1.0)
    /// or 15 (ACPI 2.0+). Revision 2 and later need 36 bytes, a `length` of
    /// 36 and a zero extended checksum; earlier ones only the 20-byte checksum.
    pub fn parse(bytes: &[u8]) -> Result<Rsdp> {
        let Some(v1) = bytes.get(..RSDP_V1_LEN) else {
            return Err(Error::RsdpTooShort {
                len: bytes.len(),
                needed: RSDP_V1_LEN,
            });
        };
        let mut signature = [0u8; 8];
        signature.copy_from_slice(&v1[..8]);
        if signature != SIGNATURE {
            return Err(Error::RsdpSignature { found: signature });
        }
        let sum = byte_sum(v1);
        if sum != 0 {
            return Err(Error::RsdpChecksum { sum });
        }
        // Decode through the `acpi` crate's layout. A v1 copy is padded with
        // zeros; its extended fields are then never read.
        let mut full = [0u8; RSDP_V2_LEN];
        let available = bytes.len().min(RSDP_V2_LEN);
        full[..available].copy_from_slice(&bytes[..available]);
        let Some(layout) = read_plain::<::acpi::rsdp::Rsdp>(&full) else {
            return Err(Error::RsdpTooShort {
                len: bytes.len(),
                needed: RSDP_V2_LEN,
            });
        };
        let mut oem_id = [0u8; 6];
        oem_id.copy_from_slice(&v1[9..15]);
        let revision = layout.revision();
        let xsdt_address = if revision >= 2 {
            if bytes.len() < RSDP_V2_LEN {
                return Err(Error::RsdpTooShort {
                    len: bytes.len(),
                    needed: RSDP_V2_LEN,
                });
            }
            // The crate's `length()` asserts revision > 0, which holds here.
            let length = layout.length();
            if length as usize != RSDP_V2_LEN {
                return Err(Error::RsdpLength { length });
            }
            let sum = byte_sum(&full);
            if sum != 0 {
                return Err(Error::RsdpExtendedChecksum { sum });
            }
            Some(layout.xsdt_address())
        } else {
            None
        };
        Ok(Rsdp {
            phys: None,
            revision,
            oem_id,
            rsdt_address: layout.rsdt_address(),
            xsdt_address,
        })
    }

    /// Reads and validates the RSDP at `phys` (20 bytes, then 36 if the revision asks for them).
    pub fn read(memory: &impl PhysMemory, phys: u64) -> Result<Rsdp> {
        let mut bytes = [0u8; RSDP_V2_LEN];
        memory.read_bytes(phys, &mut bytes[..RSDP_V1_LEN])?;
        let len = if bytes[15] >= 2 {
            // The address comes from firmware (an EFI table): 36 bytes from it must not wrap.
            let extended = phys
                .checked_add(RSDP_V1_LEN as u64)
                .ok_or(Error::PhysRead { phys, len: RSDP_V2_LEN })?;
            memory.read_bytes(extended, &mut bytes[RSDP_V1_LEN..])?;
            RSDP_V2_LEN
        } else {
            RSDP_V1_LEN
        };
        let mut rsdp = Rsdp::parse(&bytes[..len])?;
        rsdp.phys = Some(phys);
        Ok(rsdp)
    }

    /// Scans the first KiB of the EBDA (segment at 0x40E) and then
    /// 0xE0000..=0xFFFFF on 16-byte boundaries; the first candidate that
    /// validates wins, invalid candidates are skipped.
    pub fn find_in_bios_areas(memory: &impl PhysMemory) -> Result<Rsdp> {
        let mut segment = [0u8; 2];
        if memory.read_bytes(EBDA_POINTER, &mut segment).is_ok() {
            let ebda = u64::from(u16::from_le_bytes(segment)) << 4;
            if EBDA_RANGE.contains(&ebda) {
                let end = (ebda + 1024).min(EBDA_RANGE.end);
                if let Some(found) = scan(memory, ebda..end) {
                    return Ok(found);
                }
            }
        }
        scan(memory, BIOS_AREA).ok_or(Error::RsdpNotFound)
    }
}

/// "IBI SYST": the EFI system table's signature.
const EFI_SYSTEM_TABLE_SIGNATURE: u64 = 0x5453_5953_2049_4249;
/// Offsets in the 64-bit EFI system table: entry count and configuration table pointer.
const EFI_CONFIG_COUNT: u64 = 104;
const EFI_CONFIG_TABLE: u64 = 112;
/// A configuration table entry: the vendor GUID, then the table's address.
const EFI_CONFIG_ENTRY_LEN: u64 = 24;
const EFI_CONFIG_ENTRY_TABLE: u64 = 16;
/// Configuration table entries read at most (firmware lists a few dozen).
pub const MAX_EFI_CONFIG_ENTRIES: u64 = 1024;
/// EFI_ACPI_20_TABLE_GUID and ACPI_TABLE_GUID in memory byte order.
const ACPI_20_GUID: [u8; 16] = [
    0x71, 0xe8, 0x68, 0x88, 0xf1, 0xe4, 0xd3, 0x11, 0xbc, 0x22, 0x00, 0x80, 0xc7, 0x3c, 0x88, 0x81,
];
const ACPI_10_GUID: [u8; 16] = [
    0x30, 0x2d, 0x9d, 0xeb, 0x88, 0x2d, 0xd3, 0x11, 0x9a, 0x16, 0x00, 0x90, 0x27, 0x3f, 0xc1, 0x4d,
];

impl Rsdp {
    /// Finds the RSDP through the 64-bit EFI system table at `phys` (what a
    /// Multiboot2 loader passes in tag 12 when it gives no ACPI tag): its
    /// configuration table's ACPI 2.0 entry, else its ACPI 1.0 entry.
    pub fn from_efi_system_table(memory: &impl PhysMemory, phys: u64) -> Result<Rsdp> {
        let read_u64 = |at: u64| -> Result<u64> {
            let mut bytes = [0u8; 8];
            memory.read_bytes(at, &mut bytes)?;
            Ok(u64::from_le_bytes(bytes))
        };
        let error = |reason| Error::EfiSystemTable { phys, reason };
        if read_u64(phys)? != EFI_SYSTEM_TABLE_SIGNATURE {
            return Err(error("no \"IBI SYST\" signature"));
        }
        let field = |base: u64, offset: u64, reason| base.checked_add(offset).ok_or(error(reason));
        let count = read_u64(field(phys, EFI_CONFIG_COUNT, "system table wraps past 2^64")?)?;
        if count > MAX_EFI_CONFIG_ENTRIES {
            return Err(error("more than 1024 configuration table entries"));
        }
        let table = read_u64(field(phys, EFI_CONFIG_TABLE, "system table wraps past 2^64")?)?;
        let mut acpi_10 = None;
        let wraps = "configuration table wraps past 2^64";
        for index in 0..count {
            // `count <= 1024`: the product fits.
            let entry = field(table, index * EFI_CONFIG_ENTRY_LEN, wraps)?;
            let mut guid = [0u8; 16];
            memory.read_bytes(entry, &mut guid)?;
            if guid == ACPI_20_GUID {
                return Rsdp::read(memory, read_u64(field(entry, EFI_CONFIG_ENTRY_TABLE, wraps)?)?);
            }
            if guid == ACPI_10_GUID && acpi_10.is_none() {
                acpi_10 = Some(read_u64(field(entry, EFI_CONFIG_ENTRY_TABLE, wraps)?)?);
            }
        }
        match acpi_10 {
            Some(address) => Rsdp::read(memory, address),
            None => Err(error("no ACPI entry in its configuration table")),
        }
    }
}

fn scan(memory: &impl PhysMemory, area: core::ops::Range<u64>) -> Option<Rsdp> {
    let mut chunk = [0u8; 1024];
    let mut base = area.start & !0xF;
    while base < area.end {
        let take = (area.end - base).min(chunk.len() as u64) as usize;
        if memory.read_bytes(base, &mut chunk[..take]).is_ok() {
            for offset in (0..take).step_by(16) {
                if chunk[offset..].starts_with(&SIGNATURE)
                    && let Ok(rsdp) = Rsdp::read(memory, base + offset as u64)
                {
                    return Some(rsdp);
                }
            }
        }
        base += take as u64;
    }
    None
}
