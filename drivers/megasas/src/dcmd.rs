//! Parsers for DCMD and SCSI replies (reference §4.2, §4.3). Every length, count and field comes
//! from the device, so each is checked before use; nothing here indexes without a bound.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use crate::Error;

/// Buffer size CTRL_GET_INFO needs (QEMU rejects less).
pub const CTRL_INFO_LEN: usize = 2048;
/// Largest LD_GET_LIST buffer QEMU accepts: 8-byte header plus 64 entries of 16 bytes (pitfall 13).
pub const LD_LIST_LEN: usize = 8 + 64 * 16;
/// Buffer size LD_GET_INFO needs.
pub const LD_INFO_LEN: usize = 384;
/// READ CAPACITY(16) reply length.
pub const READ_CAPACITY16_LEN: usize = 32;
/// Logical drive target ids are below this (MFI_MAX_LD).
pub const MAX_LD: usize = 64;

fn le16(b: &[u8], off: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(off..off + 2)?.try_into().ok()?))
}
fn le32(b: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(off..off + 4)?.try_into().ok()?))
}
fn le64(b: &[u8], off: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(off..off + 8)?.try_into().ok()?))
}
fn be32(b: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(off..off + 4)?.try_into().ok()?))
}
fn be64(b: &[u8], off: usize) -> Option<u64> {
    Some(u64::from_be_bytes(b.get(off..off + 8)?.try_into().ok()?))
}

/// A NUL-terminated (or full-width) ASCII field, with non-printable bytes replaced by '?'.
fn ascii_field(b: &[u8], off: usize, len: usize) -> Option<String> {
    let raw = b.get(off..off + len)?;
    let end = raw.iter().position(|&c| c == 0).unwrap_or(raw.len());
    let text = raw[..end]
        .iter()
        .map(|&c| if (0x20..0x7F).contains(&c) { c as char } else { '?' })
        .collect::<String>();
    Some(String::from(text.trim_end()))
}

fn short(what: &'static str, len: usize, expected: &'static str) -> Error {
    Error::MalformedReply {
        what,
        value: len as u64,
        expected,
    }
}

/// The controller information the driver uses (CTRL_GET_INFO).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControllerInfo {
    /// PCI vendor id as reported by the firmware.
    pub vendor_id: u16,
    /// PCI device id as reported by the firmware.
    pub device_id: u16,
    /// PCI subsystem vendor id.
    pub subvendor_id: u16,
    /// PCI subsystem id.
    pub subdevice_id: u16,
    /// Product name, e.g. "LSI MegaRAID SAS 9260-8i".
    pub product: String,
    /// Serial number.
    pub serial: String,
    /// Version of the first firmware image component, e.g. "1.80-QEMU" (empty if none reported).
    pub firmware: String,
    /// Package version, e.g. "2.5+-QEMU".
    pub package: String,
    /// Maximum outstanding commands.
    pub max_cmds: u16,
    /// Maximum scatter-gather elements per command.
    pub max_sge: u16,
    /// Maximum transfer per command in 512-byte sectors.
    pub max_request_sectors: u32,
    /// Number of logical drives present.
    pub lds_present: u16,
    /// Number of physical devices present.
    pub pds_present: u16,
}

impl ControllerInfo {
    /// Parses a CTRL_GET_INFO reply (at least [`CTRL_INFO_LEN`] bytes).
    pub fn parse(b: &[u8]) -> Result<Self, Error> {
        const WHAT: &str = "CTRL_GET_INFO reply";
        if b.len() < CTRL_INFO_LEN {
            return Err(short(WHAT, b.len(), "at least 2048 bytes"));
        }
        // The buffer is long enough for every fixed offset below, so the `?`s cannot fire; they
        // keep the parser free of unchecked indexing all the same.
        let bad = || short(WHAT, b.len(), "at least 2048 bytes");
        let components = le32(b, 0xB4).ok_or_else(bad)?;
        let firmware = if (1..=8).contains(&components) {
            ascii_field(b, 0xB8 + 8, 32).ok_or_else(bad)?
        } else if components == 0 {
            String::new()
        } else {
            return Err(Error::MalformedReply {
                what: "CTRL_GET_INFO image_component_count",
                value: u64::from(components),
                expected: "0..=8",
            });
        };
        let max_cmds = le16(b, 0x5B8).ok_or_else(bad)?;
        if max_cmds < 2 {
            return Err(Error::MalformedReply {
                what: "CTRL_GET_INFO max_cmds",
                value: u64::from(max_cmds),
                expected: "at least 2",
            });
        }
        let max_sge = le16(b, 0x5BA).ok_or_else(bad)?;
        if max_sge == 0 {
            return Err(Error::MalformedReply {
                what: "CTRL_GET_INFO max_sg_elements",
                value: 0,
                expected: "at least 1",
            });
        }
        Ok(Self {
            vendor_id: le16(b, 0x00).ok_or_else(bad)?,
            device_id: le16(b, 0x02).ok_or_else(bad)?,
            subvendor_id: le16(b, 0x04).ok_or_else(bad)?,
            subdevice_id: le16(b, 0x06).ok_or_else(bad)?,
            product: ascii_field(b, 0x540, 80).ok_or_else(bad)?,
            serial: ascii_field(b, 0x590, 32).ok_or_else(bad)?,
            firmware,
            package: ascii_field(b, 0x640, 96).ok_or_else(bad)?,
            max_cmds,
            max_sge,
            max_request_sectors: le32(b, 0x5BC).ok_or_else(bad)?,
            lds_present: le16(b, 0x5C0).ok_or_else(bad)?,
            pds_present: le16(b, 0x5C6).ok_or_else(bad)?,
        })
    }
}

impl fmt::Display for ControllerInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (fw {}, package {}, serial {}), max {} cmds, {} SGEs, {} sectors/request, {} LDs",
            self.product,
            self.firmware,
            self.package,
            self.serial,
            self.max_cmds,
            self.max_sge,
            self.max_request_sectors,
            self.lds_present
        )
    }
}

/// One LD_GET_LIST entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LdListEntry {
    /// Target id (what LD READ/WRITE frames address).
    pub target: u8,
    /// LD state (3 = OPTIMAL).
    pub state: u8,
    /// Size in 512-byte sectors, whatever the logical block size.
    pub size_sectors: u64,
}

/// Parses an LD_GET_LIST reply. Entries are returned sorted by target id (QEMU lists them in
/// reverse creation order, so position means nothing).
pub fn parse_ld_list(b: &[u8]) -> Result<Vec<LdListEntry>, Error> {
    let count = le32(b, 0).ok_or_else(|| short("LD_GET_LIST reply", b.len(), "at least 8 bytes"))?;
    let room = b.len().saturating_sub(8) / 16;
    let limit = room.min(MAX_LD);
    if count as usize > limit {
        return Err(Error::MalformedReply {
            what: "LD_GET_LIST ld_count",
            value: u64::from(count),
            expected: "at most 64 and what fits the buffer",
        });
    }
    let mut seen = [false; MAX_LD];
    let mut out = Vec::with_capacity(count as usize);
    for i in 0..count as usize {
        let e = 8 + i * 16;
        let target = b[e];
        if usize::from(target) >= MAX_LD {
            return Err(Error::MalformedReply {
                what: "LD_GET_LIST target id",
                value: u64::from(target),
                expected: "0..64",
            });
        }
        if core::mem::replace(&mut seen[usize::from(target)], true) {
            return Err(Error::MalformedReply {
                what: "LD_GET_LIST duplicate target id",
                value: u64::from(target),
                expected: "each target once",
            });
        }
        let size_sectors = le64(b, e + 8).ok_or_else(|| short("LD_GET_LIST entry", e, "inside the buffer"))?;
        out.push(LdListEntry {
            target,
            state: b[e + 4],
            size_sectors,
        });
    }
    out.sort_by_key(|e| e.target);
    Ok(out)
}

/// The LD_GET_INFO fields the driver reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LdInfo {
    /// Target id echoed by the firmware.
    pub target: u8,
    /// LD state (3 = OPTIMAL).
    pub state: u8,
    /// Size in 512-byte sectors.
    pub size_sectors: u64,
}

impl LdInfo {
    /// Parses an LD_GET_INFO reply (at least [`LD_INFO_LEN`] bytes).
    pub fn parse(b: &[u8]) -> Result<Self, Error> {
        let bad = || short("LD_GET_INFO reply", b.len(), "at least 384 bytes");
        if b.len() < LD_INFO_LEN {
            return Err(bad());
        }
        Ok(Self {
            target: *b.first().ok_or_else(bad)?,
            state: *b.get(0x26).ok_or_else(bad)?,
            size_sectors: le64(b, 0x100).ok_or_else(bad)?,
        })
    }
}

/// A READ CAPACITY(16) reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capacity {
    /// Number of logical blocks.
    pub blocks: u64,
    /// Logical block size in bytes.
    pub block_size: u32,
}

impl Capacity {
    /// Parses a READ CAPACITY(16) reply (the first 12 bytes are needed).
    pub fn parse(b: &[u8]) -> Result<Self, Error> {
        let bad = || short("READ CAPACITY(16) reply", b.len(), "at least 12 bytes");
        let last_lba = be64(b, 0).ok_or_else(bad)?;
        let block_size = be32(b, 8).ok_or_else(bad)?;
        if !(512..=65536).contains(&block_size) || !block_size.is_power_of_two() {
            return Err(Error::MalformedReply {
                what: "READ CAPACITY(16) block size",
                value: u64::from(block_size),
                expected: "a power of two in 512..=65536",
            });
        }
        let blocks = last_lba.checked_add(1).ok_or(Error::MalformedReply {
            what: "READ CAPACITY(16) last LBA",
            value: last_lba,
            expected: "below 2^64 - 1",
        })?;
        // The drive's byte size must fit u64 for the range checks of the I/O path.
        if blocks.checked_mul(u64::from(block_size)).is_none() {
            return Err(Error::MalformedReply {
                what: "READ CAPACITY(16) block count",
                value: blocks,
                expected: "a byte size below 2^64",
            });
        }
        Ok(Self { blocks, block_size })
    }
}
