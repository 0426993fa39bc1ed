//! Parsers for DCMD and SCSI replies (CTRL_GET_INFO, the LD and PD lists). Every length, count and field comes
//! from the device, so each is checked before use; nothing here indexes without a bound.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use crate::Error;

/// Buffer size CTRL_GET_INFO needs (QEMU rejects less).
pub const CTRL_INFO_LEN: usize = 2048;
/// Largest LD_GET_LIST buffer QEMU accepts: 8-byte header plus 64 entries of 16 bytes.
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
    parse_ld_list_up_to(b, MAX_LD)
}

/// [`parse_ld_list`] for firmware that may list up to `max_lds` (64, or 256 when asked with
/// mbox b[0] = 1 on 256-VD firmware, as Linux does for Fusion). Target ids must be below it.
pub fn parse_ld_list_up_to(b: &[u8], max_lds: usize) -> Result<Vec<LdListEntry>, Error> {
    let max_lds = max_lds.min(256);
    if b.len() < 8 {
        return Err(short("LD_GET_LIST reply", b.len(), "at least 8 bytes"));
    }
    let count = le32(b, 0).ok_or_else(|| short("LD_GET_LIST reply", b.len(), "at least 8 bytes"))?;
    let room = b.len().saturating_sub(8) / 16;
    let limit = room.min(max_lds);
    if count as usize > limit {
        return Err(Error::MalformedReply {
            what: "LD_GET_LIST ld_count",
            value: u64::from(count),
            expected: "at most the LD limit (64, or 256) and what fits the buffer",
        });
    }
    let mut seen = [false; 256];
    let mut out = Vec::with_capacity(count as usize);
    for i in 0..count as usize {
        let e = 8 + i * 16;
        let target = b[e];
        if usize::from(target) >= max_lds {
            return Err(Error::MalformedReply {
                what: "LD_GET_LIST target id",
                value: u64::from(target),
                expected: "below the LD limit (64, or 256)",
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

/// PD_LIST_QUERY buffer (Linux's size for Fusion; QEMU's MFI model needs at least 32).
pub const PD_LIST_LEN: usize = 8192;
/// Bytes per `MR_PD_ADDRESS` entry of a PD list.
const PD_ENTRY_LEN: usize = 24;
/// PD list entries (device ids) a driver keeps track of (Linux's `MEGASAS_MAX_PD`).
pub const MAX_PD: usize = 256;

/// One physical device of a PD_LIST_QUERY reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PdListEntry {
    /// Firmware device id (QEMU's MFI model: `(scsi_id << 8) | lun`).
    pub device_id: u16,
    /// SCSI peripheral device type (0 = disk, 5 = CD/DVD).
    pub scsi_type: u8,
}

/// Parses a PD_LIST_QUERY / PD_GET_LIST reply (`MR_PD_LIST`: size u32, count u32, then 24-byte
/// entries with the device id at 0 and the SCSI device type at 6). The count must fit both
/// the buffer and the header's size; at most [`MAX_PD`] entries; a device id listed twice is
/// refused. Entries are sorted by device id.
pub fn parse_pd_list(b: &[u8]) -> Result<Vec<PdListEntry>, Error> {
    let bad = || short("PD list reply", b.len(), "at least 8 bytes");
    let size = le32(b, 0).ok_or_else(bad)? as usize;
    let count = le32(b, 4).ok_or_else(bad)? as usize;
    let room = b.len().saturating_sub(8) / PD_ENTRY_LEN;
    if count > room.min(MAX_PD) || (count > 0 && size < 8 + count * PD_ENTRY_LEN) {
        return Err(Error::MalformedReply {
            what: "PD list count",
            value: count as u64,
            expected: "at most 256, within the buffer and the reply's size field",
        });
    }
    let mut out: Vec<PdListEntry> = Vec::with_capacity(count);
    for i in 0..count {
        let e = 8 + i * PD_ENTRY_LEN;
        let device_id = le16(b, e).ok_or_else(bad)?;
        if out.iter().any(|p| p.device_id == device_id) {
            return Err(Error::MalformedReply {
                what: "PD list duplicate device id",
                value: u64::from(device_id),
                expected: "each device once",
            });
        }
        out.push(PdListEntry {
            device_id,
            scsi_type: b[e + 6],
        });
    }
    out.sort_by_key(|p| p.device_id);
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

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    fn info_buf() -> Vec<u8> {
        let mut b = vec![0u8; CTRL_INFO_LEN];
        b[0xB4] = 1;
        b[0xC0..0xC9].copy_from_slice(b"1.80-QEMU");
        b[0x540..0x548].copy_from_slice(b"LSI Test");
        b[0x5B8..0x5BA].copy_from_slice(&1008u16.to_le_bytes());
        b[0x5BA..0x5BC].copy_from_slice(&80u16.to_le_bytes());
        b[0x5BC..0x5C0].copy_from_slice(&65535u32.to_le_bytes());
        b
    }

    fn pd_list(ids: &[(u16, u8)]) -> Vec<u8> {
        let mut b = vec![0u8; 64 + ids.len() * 24];
        b[0..4].copy_from_slice(&((8 + 24 * ids.len()) as u32).to_le_bytes());
        b[4..8].copy_from_slice(&(ids.len() as u32).to_le_bytes());
        for (i, &(id, ty)) in ids.iter().enumerate() {
            b[8 + 24 * i..10 + 24 * i].copy_from_slice(&id.to_le_bytes());
            b[8 + 24 * i + 6] = ty;
        }
        b
    }

    #[test]
    fn pd_list_parses_sorted_and_rejects_bad_counts() {
        let l = parse_pd_list(&pd_list(&[(0x0300, 0), (0x0000, 5)])).unwrap();
        assert_eq!(
            l,
            vec![
                PdListEntry {
                    device_id: 0,
                    scsi_type: 5
                },
                PdListEntry {
                    device_id: 0x0300,
                    scsi_type: 0
                }
            ]
        );
        assert!(parse_pd_list(&pd_list(&[])).unwrap().is_empty());
        // Count beyond the size field, beyond the buffer, duplicates, short header.
        let mut b = pd_list(&[(1, 0)]);
        b[0..4].copy_from_slice(&8u32.to_le_bytes());
        assert!(matches!(parse_pd_list(&b), Err(Error::MalformedReply { value: 1, .. })));
        let mut b = pd_list(&[(1, 0)]);
        b[4..8].copy_from_slice(&1000u32.to_le_bytes());
        assert!(matches!(
            parse_pd_list(&b),
            Err(Error::MalformedReply { value: 1000, .. })
        ));
        assert!(matches!(
            parse_pd_list(&pd_list(&[(7, 0), (7, 0)])),
            Err(Error::MalformedReply { value: 7, .. })
        ));
        assert!(parse_pd_list(&[0u8; 6]).is_err());
    }

    #[test]
    fn ld_list_up_to_256_accepts_high_targets_only_when_asked() {
        let mut b = vec![0u8; 8 + 256 * 16];
        b[0..4].copy_from_slice(&2u32.to_le_bytes());
        b[8] = 200;
        b[12] = 3;
        b[24] = 5;
        b[28] = 3;
        assert!(matches!(
            parse_ld_list(&b),
            Err(Error::MalformedReply { value: 200, .. })
        ));
        let l = parse_ld_list_up_to(&b, 256).unwrap();
        assert_eq!(l.iter().map(|e| e.target).collect::<Vec<_>>(), vec![5, 200]);
    }

    #[test]
    fn controller_info_parses_and_rejects_bad_fields() {
        let i = ControllerInfo::parse(&info_buf()).unwrap();
        assert_eq!((i.max_cmds, i.max_sge, i.max_request_sectors), (1008, 80, 65535));
        assert_eq!((i.product.as_str(), i.firmware.as_str()), ("LSI Test", "1.80-QEMU"));

        assert!(matches!(
            ControllerInfo::parse(&info_buf()[..2047]),
            Err(Error::MalformedReply { value: 2047, .. })
        ));
        let mut b = info_buf();
        b[0xB4] = 9;
        assert!(matches!(
            ControllerInfo::parse(&b),
            Err(Error::MalformedReply { value: 9, .. })
        ));
        let mut b = info_buf();
        b[0x5B8..0x5BA].copy_from_slice(&1u16.to_le_bytes());
        assert!(matches!(
            ControllerInfo::parse(&b),
            Err(Error::MalformedReply { value: 1, .. })
        ));
        let mut b = info_buf();
        b[0x5BA..0x5BC].copy_from_slice(&0u16.to_le_bytes());
        assert!(ControllerInfo::parse(&b).is_err());
        // Non-printable bytes in strings are replaced, not trusted.
        let mut b = info_buf();
        b[0x540] = 0x07;
        assert!(ControllerInfo::parse(&b).unwrap().product.starts_with('?'));
    }

    fn ld_list(entries: &[(u8, u64)], count: u32, len: usize) -> Vec<u8> {
        let mut b = vec![0u8; len];
        b[0..4].copy_from_slice(&count.to_le_bytes());
        for (i, &(t, size)) in entries.iter().enumerate() {
            let e = 8 + 16 * i;
            b[e] = t;
            b[e + 4] = 3;
            b[e + 8..e + 16].copy_from_slice(&size.to_le_bytes());
        }
        b
    }

    #[test]
    fn ld_list_is_sorted_by_target_and_bounds_checked() {
        let b = ld_list(&[(3, 100), (0, 200)], 2, LD_LIST_LEN);
        let l = parse_ld_list(&b).unwrap();
        assert_eq!(
            l.iter().map(|e| (e.target, e.size_sectors)).collect::<Vec<_>>(),
            [(0, 200), (3, 100)]
        );
        // A count larger than the buffer holds.
        let b = ld_list(&[(0, 1)], 3, 8 + 16 * 2);
        assert!(matches!(parse_ld_list(&b), Err(Error::MalformedReply { value: 3, .. })));
        // A count above 64.
        assert!(parse_ld_list(&ld_list(&[], 65, 8 + 16 * 70)).is_err());
        // Target ids must be below 64 and unique.
        assert!(matches!(
            parse_ld_list(&ld_list(&[(64, 1)], 1, LD_LIST_LEN)),
            Err(Error::MalformedReply { value: 64, .. })
        ));
        assert!(parse_ld_list(&ld_list(&[(5, 1), (5, 2)], 2, LD_LIST_LEN)).is_err());
        assert!(parse_ld_list(&[0u8; 4]).is_err());
        assert_eq!(parse_ld_list(&ld_list(&[], 0, 8)).unwrap(), []);
    }

    fn cap(last: u64, bs: u32) -> [u8; 32] {
        let mut b = [0u8; 32];
        b[0..8].copy_from_slice(&last.to_be_bytes());
        b[8..12].copy_from_slice(&bs.to_be_bytes());
        b
    }

    #[test]
    fn read_capacity_validates_block_size_and_count() {
        assert_eq!(
            Capacity::parse(&cap(2_097_151, 4096)).unwrap(),
            Capacity {
                blocks: 2_097_152,
                block_size: 4096
            }
        );
        for bad in [0, 256, 513, 131_072] {
            assert!(
                matches!(Capacity::parse(&cap(10, bad)), Err(Error::MalformedReply { value, .. }) if value == u64::from(bad)),
                "block size {bad}"
            );
        }
        assert!(Capacity::parse(&cap(u64::MAX, 512)).is_err());
        assert!(
            Capacity::parse(&cap(u64::MAX / 2, 4096)).is_err(),
            "byte size overflows"
        );
        assert!(Capacity::parse(&cap(1, 512)[..11]).is_err());
    }

    #[test]
    fn ld_info_needs_its_full_size() {
        let mut b = vec![0u8; LD_INFO_LEN];
        b[0] = 7;
        b[0x26] = 3;
        b[0x100..0x108].copy_from_slice(&4096u64.to_le_bytes());
        assert_eq!(
            LdInfo::parse(&b).unwrap(),
            LdInfo {
                target: 7,
                state: 3,
                size_sectors: 4096
            }
        );
        assert!(LdInfo::parse(&b[..383]).is_err());
    }

    #[test]
    fn parsers_never_panic_on_arbitrary_bytes() {
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..2000 {
            let len = (next() % 2200) as usize;
            let mut b: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            // Keep counts small sometimes so the entry loops run.
            if round % 2 == 0 && len >= 4 {
                b[0..4].copy_from_slice(&((next() % 70) as u32).to_le_bytes());
            }
            let _ = ControllerInfo::parse(&b);
            let _ = parse_ld_list(&b);
            let _ = LdInfo::parse(&b);
            let _ = Capacity::parse(&b);
            let _ = crate::Sense::decode(&b);
        }
    }
}
