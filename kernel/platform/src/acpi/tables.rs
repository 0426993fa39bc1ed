//! Shared pieces of the tables parsed from a whole-table copy: the copy
//! itself, little-endian field reads, the Generic Address Structure, and a
//! walker over variable-length sub-table entries.
//!
//! The SRAT, SLIT, HPET, FADT, DMAR and IVRS parsers copy the validated table
//! once ([`table_bytes`]; its length is capped by [`super::MAX_TABLE_LEN`])
//! and read fields from the copy, so every read is a slice bounds check.

use alloc::vec;
use alloc::vec::Vec;

use super::{PhysMemory, Sdt};
use crate::error::{Error, Result, TableSignature};

/// Copies the whole validated table.
pub fn table_bytes(memory: &impl PhysMemory, table: &Sdt) -> Result<Vec<u8>> {
    // `length <= MAX_TABLE_LEN` (1 MiB): it fits a usize.
    let mut bytes = vec![0u8; table.length as usize];
    table.read(memory, 0, &mut bytes)?;
    Ok(bytes)
}

/// A field read past the table end (after `expect` checked the fixed part,
/// only an entry's own checked length can lead here).
fn overrun(signature: TableSignature, offset: usize, len: usize, bytes: &[u8]) -> Error {
    Error::TableOverrun {
        signature,
        offset: to_u32(offset),
        len: to_u32(len),
        length: to_u32(bytes.len()),
    }
}

/// A table offset or length for an error report (tables are at most 1 MiB;
/// a larger value saturates).
fn to_u32(value: usize) -> u32 {
    u32::try_from(value).unwrap_or(u32::MAX)
}

/// Bounds-checked little-endian field reads from a table copy.
#[derive(Debug, Clone, Copy)]
pub struct Fields<'a> {
    pub signature: TableSignature,
    pub bytes: &'a [u8],
}

impl<'a> Fields<'a> {
    pub fn new(signature: TableSignature, bytes: &'a [u8]) -> Fields<'a> {
        Fields { signature, bytes }
    }

    pub fn slice(&self, offset: usize, len: usize) -> Result<&'a [u8]> {
        offset
            .checked_add(len)
            .and_then(|end| self.bytes.get(offset..end))
            .ok_or_else(|| overrun(self.signature, offset, len, self.bytes))
    }

    pub fn u8(&self, offset: usize) -> Result<u8> {
        Ok(self.slice(offset, 1)?[0])
    }

    pub fn u16(&self, offset: usize) -> Result<u16> {
        let b = self.slice(offset, 2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    pub fn u32(&self, offset: usize) -> Result<u32> {
        let b = self.slice(offset, 4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub fn u64(&self, offset: usize) -> Result<u64> {
        let b = self.slice(offset, 8)?;
        let mut out = [0u8; 8];
        out.copy_from_slice(b);
        Ok(u64::from_le_bytes(out))
    }

    pub fn gas(&self, offset: usize) -> Result<GenericAddress> {
        let b = self.slice(offset, 12)?;
        let mut address = [0u8; 8];
        address.copy_from_slice(&b[4..12]);
        Ok(GenericAddress {
            space: AddressSpace::from_id(b[0]),
            bit_width: b[1],
            bit_offset: b[2],
            access_size: b[3],
            address: u64::from_le_bytes(address),
        })
    }
}

/// The address space of a Generic Address Structure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressSpace {
    /// 0: system memory (MMIO).
    Memory,
    /// 1: system I/O ports.
    Io,
    /// Anything else (PCI config, embedded controller, ...), with its id.
    Other(u8),
}

impl AddressSpace {
    fn from_id(id: u8) -> AddressSpace {
        match id {
            0 => AddressSpace::Memory,
            1 => AddressSpace::Io,
            other => AddressSpace::Other(other),
        }
    }

    /// The name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            AddressSpace::Memory => "memory",
            AddressSpace::Io => "I/O",
            AddressSpace::Other(_) => "other",
        }
    }
}

/// An ACPI Generic Address Structure (12 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GenericAddress {
    pub space: AddressSpace,
    pub bit_width: u8,
    pub bit_offset: u8,
    /// 0 undefined, 1 byte, 2 word, 3 dword, 4 qword.
    pub access_size: u8,
    pub address: u64,
}

/// How a table's sub-table entries start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryHeader {
    /// `type: u8, length: u8` (MADT, SRAT).
    ByteType,
    /// `type: u16, length: u16` (DMAR remapping structures).
    WordType,
    /// `type: u8, flags: u8, length: u16` (IVRS blocks).
    ByteTypeWordLength,
}

/// One sub-table entry: its type and its bytes (header included).
#[derive(Debug, Clone, Copy)]
pub struct Entry<'a> {
    pub entry_type: u16,
    pub bytes: Fields<'a>,
}

/// Walks the entries from `start` to the table end. Each entry's length is
/// checked against `min_len(type)` (at least its header) and against the
/// table end before it is handed out, so the walk always advances and ends.
pub fn entries<'a>(
    fields: Fields<'a>,
    start: usize,
    header: EntryHeader,
    min_len: impl Fn(u16) -> usize,
) -> Result<Vec<Entry<'a>>> {
    let header_len = match header {
        EntryHeader::ByteType => 2,
        EntryHeader::WordType | EntryHeader::ByteTypeWordLength => 4,
    };
    let mut out = Vec::new();
    let mut offset = start;
    let end = fields.bytes.len();
    while offset < end {
        // A header cut by the table end is an overrun (`slice` checks it).
        let head = fields.slice(offset, header_len)?;
        let (entry_type, length) = match header {
            EntryHeader::ByteType => (u16::from(head[0]), usize::from(head[1])),
            EntryHeader::WordType => (
                u16::from_le_bytes([head[0], head[1]]),
                usize::from(u16::from_le_bytes([head[2], head[3]])),
            ),
            EntryHeader::ByteTypeWordLength => {
                (u16::from(head[0]), usize::from(u16::from_le_bytes([head[2], head[3]])))
            }
        };
        let min = min_len(entry_type).max(header_len);
        // At least the header's length, so the walk advances: a length of 0 or 1 is refused here.
        if length < min {
            return Err(Error::AcpiEntryTooShort {
                signature: fields.signature,
                offset: to_u32(offset),
                entry_type,
                length: to_u32(length),
                min: to_u32(min),
            });
        }
        // `offset < end`, so `end - offset` does not wrap.
        let Some(bytes) = (length <= end - offset)
            .then(|| fields.bytes.get(offset..offset + length))
            .flatten()
        else {
            return Err(Error::AcpiEntryOverrun {
                signature: fields.signature,
                offset: to_u32(offset),
                entry_type,
                length: to_u32(length),
                table_length: to_u32(end),
            });
        };
        out.push(Entry {
            entry_type,
            bytes: Fields::new(fields.signature, bytes),
        });
        offset += length;
    }
    Ok(out)
}
