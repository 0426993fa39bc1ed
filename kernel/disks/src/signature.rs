//! Write safety: does the start of a disk carry a partition table or a file
//! system? A write job must not destroy one unless it says so (the workload's
//! `destroy=1`); the kernel reads [`SCAN_BYTES`] from sector 0 before the
//! job's first write and asks [`detect`].
//!
//! Each check needs its magic at the documented place plus whatever field
//! the format pins down cheaply, so pseudo-random data (baremq's own verify
//! payload) does not look like a file system. baremq's verify blocks start
//! with `BAREMQv1`, which no format here can have at its own offset 0.
//! Not detected: signatures kept only at the end of a disk (GPT's backup
//! header, md superblocks v0.90 and v1.0), and formats not listed in
//! [`DiskSignature`].

use core::fmt;

/// Bytes from sector 0 that [`detect`] looks at: past the btrfs superblock
/// magic at 64 KiB + 64 bytes.
pub const SCAN_BYTES: usize = 0x11000;

/// The magic baremq's verify blocks start with (`workload::verify::VERIFY_MAGIC`).
const BAREMQ_BLOCK_MAGIC: &[u8; 8] = b"BAREMQv1";

/// What was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiskSignature {
    /// An MBR partition table with this many used entries (1..=4).
    Mbr { partitions: u8 },
    /// A GPT header at LBA 1.
    Gpt,
    /// A FAT12/16/32 boot sector (a "superfloppy" file system, no partition table).
    Fat,
    /// An NTFS boot sector.
    Ntfs,
    /// An exFAT boot sector.
    ExFat,
    /// An XFS superblock.
    Xfs,
    /// An ext2/3/4 superblock.
    Ext,
    /// A btrfs superblock.
    Btrfs,
    /// An LVM2 physical volume label.
    Lvm2,
    /// A Linux software RAID (md) superblock, version 1.1 or 1.2.
    LinuxRaid,
    /// A Linux swap signature.
    Swap,
    /// A LUKS encrypted-volume header.
    Luks,
    /// An ISO 9660 volume descriptor.
    Iso9660,
}

impl fmt::Display for DiskSignature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DiskSignature::Mbr { partitions } => {
                write!(f, "an MBR partition table (0x55AA, {partitions} partition entr")?;
                f.write_str(if *partitions == 1 { "y)" } else { "ies)" })
            }
            DiskSignature::Gpt => f.write_str("a GPT partition table (\"EFI PART\" at LBA 1)"),
            DiskSignature::Fat => f.write_str("a FAT file system"),
            DiskSignature::Ntfs => f.write_str("an NTFS file system"),
            DiskSignature::ExFat => f.write_str("an exFAT file system"),
            DiskSignature::Xfs => f.write_str("an XFS file system (\"XFSB\")"),
            DiskSignature::Ext => f.write_str("an ext2/3/4 file system (magic 0xEF53)"),
            DiskSignature::Btrfs => f.write_str("a btrfs file system"),
            DiskSignature::Lvm2 => f.write_str("an LVM2 physical volume (\"LABELONE\")"),
            DiskSignature::LinuxRaid => f.write_str("a Linux RAID (md) member"),
            DiskSignature::Swap => f.write_str("a Linux swap area"),
            DiskSignature::Luks => f.write_str("a LUKS encrypted volume"),
            DiskSignature::Iso9660 => f.write_str("an ISO 9660 file system"),
        }
    }
}

fn bytes_at(head: &[u8], offset: usize, len: usize) -> Option<&[u8]> {
    head.get(offset..offset.checked_add(len)?)
}

fn has(head: &[u8], offset: usize, magic: &[u8]) -> bool {
    bytes_at(head, offset, magic.len()) == Some(magic)
}

fn u16_at(head: &[u8], offset: usize) -> Option<u16> {
    bytes_at(head, offset, 2).map(|b| u16::from_le_bytes([b[0], b[1]]))
}

fn u32_at(head: &[u8], offset: usize) -> Option<u32> {
    bytes_at(head, offset, 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// The first partition table or file-system signature in `head` (the disk's
/// first bytes from sector 0, [`SCAN_BYTES`] or fewer on a small disk);
/// `sector_size` places the GPT header (LBA 1). `None`: nothing known found.
pub fn detect(head: &[u8], sector_size: u32) -> Option<DiskSignature> {
    let boot_signature = u16_at(head, 510) == Some(0xAA55);
    // Boot sectors with a BIOS parameter block (a jump instruction first).
    if boot_signature && matches!(head.first(), Some(0xEB | 0xE9)) {
        if has(head, 3, b"NTFS    ") {
            return Some(DiskSignature::Ntfs);
        }
        if has(head, 3, b"EXFAT   ") {
            return Some(DiskSignature::ExFat);
        }
        if has(head, 54, b"FAT12   ") || has(head, 54, b"FAT16   ") || has(head, 82, b"FAT32   ") {
            return Some(DiskSignature::Fat);
        }
    }
    if has(head, 0, b"XFSB") && u32_at(head, 4).is_some_and(|block_size| block_size.is_power_of_two()) {
        return Some(DiskSignature::Xfs);
    }
    if has(head, 0, b"LUKS\xBA\xBE") {
        return Some(DiskSignature::Luks);
    }
    let lba1 = usize::try_from(sector_size).unwrap_or(usize::MAX);
    if has(head, lba1, b"EFI PART") {
        return Some(DiskSignature::Gpt);
    }
    if boot_signature && !has(head, 0, BAREMQ_BLOCK_MAGIC) {
        let partitions = (0..4)
            .filter(|entry| {
                let at = 446 + 16 * entry;
                let status = head[at];
                let kind = head[at + 4];
                let sectors = u32_at(head, at + 12).unwrap_or(0);
                (status == 0x00 || status == 0x80) && kind != 0 && sectors != 0
            })
            .count() as u8;
        if partitions > 0 {
            return Some(DiskSignature::Mbr { partitions });
        }
    }
    // LVM2: the label sits in one of the first four 512-byte sectors.
    if (0..4).any(|sector| has(head, sector * 512, b"LABELONE") && has(head, sector * 512 + 24, b"LVM2 001")) {
        return Some(DiskSignature::Lvm2);
    }
    // md v1.1 at 0, v1.2 at 4 KiB: magic 0xa92b4efc, major version 1.
    for at in [0, 4096] {
        if u32_at(head, at) == Some(0xA92B_4EFC) && u32_at(head, at + 4) == Some(1) {
            return Some(DiskSignature::LinuxRaid);
        }
    }
    // ext2/3/4: superblock at 1 KiB; magic at +56, log2(block size / 1 KiB) at +24 is 0..=6.
    if u16_at(head, 1024 + 56) == Some(0xEF53) && u32_at(head, 1024 + 24).is_some_and(|log| log <= 6) {
        return Some(DiskSignature::Ext);
    }
    if has(head, 0x1_0040, b"_BHRfS_M") {
        return Some(DiskSignature::Btrfs);
    }
    if has(head, 4096 - 10, b"SWAPSPACE2") || has(head, 4096 - 10, b"SWAP-SPACE") {
        return Some(DiskSignature::Swap);
    }
    if has(head, 0x8000, b"\x01CD001") {
        return Some(DiskSignature::Iso9660);
    }
    None
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec;
    use std::vec::Vec;

    fn blank() -> Vec<u8> {
        vec![0u8; SCAN_BYTES]
    }

    /// What `sfdisk` writes for one Linux partition from sector 2048.
    fn mbr(entries: &[(u8, u8, u32, u32)]) -> Vec<u8> {
        let mut head = blank();
        for (index, &(status, kind, start, sectors)) in entries.iter().enumerate() {
            let at = 446 + 16 * index;
            head[at] = status;
            head[at + 4] = kind;
            head[at + 8..at + 12].copy_from_slice(&start.to_le_bytes());
            head[at + 12..at + 16].copy_from_slice(&sectors.to_le_bytes());
        }
        head[510] = 0x55;
        head[511] = 0xAA;
        head
    }

    #[test]
    fn blank_disk_has_no_signature() {
        assert_eq!(detect(&blank(), 512), None);
        assert_eq!(detect(&[], 512), None);
        assert_eq!(detect(&[0xFF; 100], 4096), None);
    }

    #[test]
    fn mbr_needs_the_boot_signature_and_a_used_entry() {
        let head = mbr(&[(0x00, 0x83, 2048, 129_024)]);
        assert_eq!(detect(&head, 512), Some(DiskSignature::Mbr { partitions: 1 }));
        let head = mbr(&[(0x80, 0x07, 2048, 1000), (0, 0x83, 4096, 1000)]);
        assert_eq!(detect(&head, 512), Some(DiskSignature::Mbr { partitions: 2 }));
        // 0x55AA with only empty entries (a blank boot sector) is not a partition table.
        assert_eq!(detect(&mbr(&[]), 512), None);
        // An entry with a bad status byte or no sectors does not count.
        assert_eq!(detect(&mbr(&[(0x12, 0x83, 2048, 1000)]), 512), None);
        assert_eq!(detect(&mbr(&[(0, 0x83, 2048, 0)]), 512), None);
        // A used entry without 0x55AA is not one either.
        let mut head = mbr(&[(0, 0x83, 2048, 1000)]);
        head[511] = 0;
        assert_eq!(detect(&head, 512), None);
    }

    #[test]
    fn gpt_is_found_at_lba_1_for_the_sector_size() {
        let mut head = mbr(&[(0, 0xEE, 1, u32::MAX)]);
        head[512..520].copy_from_slice(b"EFI PART");
        assert_eq!(detect(&head, 512), Some(DiskSignature::Gpt));
        let mut head = mbr(&[(0, 0xEE, 1, u32::MAX)]);
        head[4096..4104].copy_from_slice(b"EFI PART");
        assert_eq!(detect(&head, 4096), Some(DiskSignature::Gpt));
        // The protective MBR alone is still a partition table.
        assert_eq!(detect(&head, 512), Some(DiskSignature::Mbr { partitions: 1 }));
    }

    #[test]
    fn file_systems_are_named() {
        let mut ext = blank();
        ext[1080] = 0x53;
        ext[1081] = 0xEF;
        ext[1024 + 24] = 2;
        assert_eq!(detect(&ext, 512), Some(DiskSignature::Ext));
        ext[1024 + 24] = 77;
        assert_eq!(detect(&ext, 512), None, "implausible block size");

        let mut xfs = blank();
        xfs[0..4].copy_from_slice(b"XFSB");
        xfs[4..8].copy_from_slice(&4096u32.to_be_bytes());
        assert_eq!(detect(&xfs, 512), Some(DiskSignature::Xfs));

        let mut ntfs = mbr(&[]);
        ntfs[0] = 0xEB;
        ntfs[3..11].copy_from_slice(b"NTFS    ");
        assert_eq!(detect(&ntfs, 512), Some(DiskSignature::Ntfs));

        let mut fat = mbr(&[]);
        fat[0] = 0xEB;
        fat[82..90].copy_from_slice(b"FAT32   ");
        // A FAT boot sector's code overlaps the partition entries: it is named as FAT.
        fat[446..462].copy_from_slice(&[0, 1, 2, 3, 0x0B, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]);
        assert_eq!(detect(&fat, 512), Some(DiskSignature::Fat));

        let mut lvm = blank();
        lvm[512..520].copy_from_slice(b"LABELONE");
        lvm[536..544].copy_from_slice(b"LVM2 001");
        assert_eq!(detect(&lvm, 512), Some(DiskSignature::Lvm2));

        let mut md = blank();
        md[4096..4100].copy_from_slice(&0xA92B_4EFCu32.to_le_bytes());
        md[4100..4104].copy_from_slice(&1u32.to_le_bytes());
        assert_eq!(detect(&md, 512), Some(DiskSignature::LinuxRaid));

        let mut btrfs = blank();
        btrfs[0x1_0040..0x1_0048].copy_from_slice(b"_BHRfS_M");
        assert_eq!(detect(&btrfs, 512), Some(DiskSignature::Btrfs));
        // A disk shorter than the btrfs superblock is scanned as far as it goes.
        assert_eq!(detect(&btrfs[..0x1_0000], 512), None);

        let mut swap = blank();
        swap[4086..4096].copy_from_slice(b"SWAPSPACE2");
        assert_eq!(detect(&swap, 512), Some(DiskSignature::Swap));

        let mut luks = blank();
        luks[0..6].copy_from_slice(b"LUKS\xBA\xBE");
        assert_eq!(detect(&luks, 512), Some(DiskSignature::Luks));

        let mut iso = blank();
        iso[0x8000..0x8006].copy_from_slice(b"\x01CD001");
        assert_eq!(detect(&iso, 512), Some(DiskSignature::Iso9660));
    }

    #[test]
    fn messages_name_the_signature() {
        let text = std::format!("{}", DiskSignature::Mbr { partitions: 1 });
        assert_eq!(text, "an MBR partition table (0x55AA, 1 partition entry)");
        let text = std::format!("{}", DiskSignature::Mbr { partitions: 3 });
        assert!(text.ends_with("3 partition entries)"), "{text}");
        assert!(std::format!("{}", DiskSignature::Ext).contains("ext2/3/4"));
    }

    /// baremq's verify layout (see `workload::verify`): a 48-byte header, then
    /// pseudo-random words from (seed, lba, generation).
    fn baremq_disk(seed: u64, bs: usize, generation: u32) -> Vec<u8> {
        let mut head = blank();
        for (index, block) in head.chunks_mut(bs).enumerate() {
            let lba = (index * bs / 512) as u64;
            block[0..8].copy_from_slice(BAREMQ_BLOCK_MAGIC);
            block[8..16].copy_from_slice(&lba.to_le_bytes());
            block[16..24].copy_from_slice(&seed.to_le_bytes());
            block[24..28].copy_from_slice(&generation.to_le_bytes());
            block[28..32].copy_from_slice(&(bs as u32).to_le_bytes());
            block[32..36].copy_from_slice(&1u32.to_le_bytes());
            let mut state = seed ^ lba.rotate_left(17) ^ u64::from(generation) ^ 0x9E37_79B9_7F4A_7C15;
            for word in block[48..].chunks_mut(8) {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let bytes = state.to_le_bytes();
                word.copy_from_slice(&bytes[..word.len()]);
            }
        }
        head
    }

    #[test]
    fn baremq_verify_data_is_not_taken_for_a_signature() {
        for seed in 0..3000u64 {
            for bs in [512, 4096] {
                let head = baremq_disk(seed.wrapping_mul(0x2545_F491_4F6C_DD1D), bs, 1 + (seed % 3) as u32);
                assert_eq!(detect(&head, 512), None, "seed {seed} bs {bs}");
            }
        }
        // Even with 0x55AA and plausible entries at the end of sector 0, a
        // sector that starts with baremq's magic is baremq's, not an MBR.
        let mut head = baremq_disk(7, 512, 1);
        head[446..462].copy_from_slice(&[0, 0, 0, 0, 0x83, 0, 0, 0, 0, 8, 0, 0, 0, 8, 0, 0]);
        head[510] = 0x55;
        head[511] = 0xAA;
        assert_eq!(detect(&head, 512), None);
    }
}
