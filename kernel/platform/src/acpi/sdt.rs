//! System description table headers: validation and bounds-checked reads.

use ::acpi::sdt::SdtHeader;

use super::{PhysMemory, byte_sum, read_plain};
use crate::error::{Error, Result, TableSignature};

/// Size of the common table header.
pub const SDT_HEADER_LEN: u32 = 36;
const _: () = assert!(core::mem::size_of::<SdtHeader>() == SDT_HEADER_LEN as usize);

/// Largest table length accepted. Real MADTs/MCFGs are a few KiB; the cap
/// bounds the checksum walk when a header holds garbage.
pub const MAX_TABLE_LEN: u32 = 1 << 20;

/// A table whose header, length and checksum were validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sdt {
    /// Physical address of the header.
    pub phys: u64,
    /// Header signature.
    pub signature: TableSignature,
    /// Total length, header included; `min_len..=MAX_TABLE_LEN`.
    pub length: u32,
    /// Table revision.
    pub revision: u8,
    /// OEM id bytes (not necessarily ASCII).
    pub oem_id: [u8; 6],
    /// OEM table id bytes.
    pub oem_table_id: [u8; 8],
}

impl Sdt {
    /// Reads a header without validating anything: (signature, length).
    pub fn peek_header(memory: &impl PhysMemory, phys: u64) -> Result<(TableSignature, u32)> {
        let (header, signature) = read_header(memory, phys)?;
        Ok((signature, header.length))
    }

    /// Reads and validates the table at `phys`: signature (if `expected`),
    /// `min_len <= length <= MAX_TABLE_LEN`, and the checksum over `length`
    /// bytes, read in chunks so no buffer of `length` bytes is needed.
    pub fn load(memory: &impl PhysMemory, phys: u64, expected: Option<TableSignature>, min_len: u32) -> Result<Sdt> {
        let (header, signature) = read_header(memory, phys)?;
        let length = header.length;
        check_kind(phys, signature, length, expected, min_len)?;
        if phys.checked_add(u64::from(length)).is_none() {
            return Err(Error::PhysRead {
                phys,
                len: length as usize,
            });
        }
        let mut sum = 0u8;
        let mut chunk = [0u8; 256];
        let mut done = 0u32;
        while done < length {
            let take = (length - done).min(chunk.len() as u32) as usize;
            // `phys + length` was checked above and `done < length`.
            memory.read_bytes(phys + u64::from(done), &mut chunk[..take])?;
            sum = sum.wrapping_add(byte_sum(&chunk[..take]));
            done += take as u32;
        }
        if sum != 0 {
            return Err(Error::TableChecksum { signature, phys, sum });
        }
        Ok(Sdt {
            phys,
            signature,
            length,
            revision: header.revision,
            oem_id: header.oem_id,
            oem_table_id: header.oem_table_id,
        })
    }

    /// Checks that this loaded table is the `expected` kind and at least
    /// `min_len` bytes long (a parser's fixed part), with the errors `load` gives.
    pub fn expect(&self, expected: TableSignature, min_len: u32) -> Result<()> {
        check_kind(self.phys, self.signature, self.length, Some(expected), min_len)
    }

    /// Copies `out.len()` bytes at `offset` inside the table; errors if that
    /// would run past `length`.
    pub fn read(&self, memory: &impl PhysMemory, offset: u32, out: &mut [u8]) -> Result<()> {
        let len = u32::try_from(out.len()).unwrap_or(u32::MAX);
        let fits = offset.checked_add(len).is_some_and(|end| end <= self.length);
        if !fits {
            return Err(Error::TableOverrun {
                signature: self.signature,
                offset,
                len,
                length: self.length,
            });
        }
        // `load` checked that the table ends below 2^64; a hand-made `Sdt` may not.
        let at = self.phys.checked_add(u64::from(offset)).ok_or(Error::PhysRead {
            phys: self.phys,
            len: out.len(),
        })?;
        memory.read_bytes(at, out)
    }

    /// Little-endian u32 at `offset`.
    pub fn read_u32(&self, memory: &impl PhysMemory, offset: u32) -> Result<u32> {
        let mut bytes = [0u8; 4];
        self.read(memory, offset, &mut bytes)?;
        Ok(u32::from_le_bytes(bytes))
    }

    /// Little-endian u64 at `offset`.
    pub fn read_u64(&self, memory: &impl PhysMemory, offset: u32) -> Result<u64> {
        let mut bytes = [0u8; 8];
        self.read(memory, offset, &mut bytes)?;
        Ok(u64::from_le_bytes(bytes))
    }
}

/// The signature (if `expected`) and `min_len <= length <= MAX_TABLE_LEN`
/// checks shared by `Sdt::load` and `Sdt::expect`.
fn check_kind(
    phys: u64,
    signature: TableSignature,
    length: u32,
    expected: Option<TableSignature>,
    min_len: u32,
) -> Result<()> {
    if let Some(expected) = expected
        && signature != expected
    {
        return Err(Error::TableSignatureMismatch {
            phys,
            expected,
            found: signature,
        });
    }
    let min = min_len.max(SDT_HEADER_LEN);
    if !(min..=MAX_TABLE_LEN).contains(&length) {
        return Err(Error::TableLength {
            signature,
            phys,
            length,
            min,
            max: MAX_TABLE_LEN,
        });
    }
    Ok(())
}

/// The header through the `acpi` crate's layout, plus the raw signature bytes
/// (the crate's `Signature::as_str` would panic on non-UTF-8 garbage).
fn read_header(memory: &impl PhysMemory, phys: u64) -> Result<(SdtHeader, TableSignature)> {
    let mut bytes = [0u8; SDT_HEADER_LEN as usize];
    memory.read_bytes(phys, &mut bytes)?;
    let signature = TableSignature([bytes[0], bytes[1], bytes[2], bytes[3]]);
    // Cannot fail: the buffer is exactly the header's size.
    let header = read_plain::<SdtHeader>(&bytes).ok_or(Error::PhysRead { phys, len: bytes.len() })?;
    Ok((header, signature))
}
