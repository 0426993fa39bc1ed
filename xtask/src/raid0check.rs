//! Where a RAID-0 LD's blocks landed, read from its member disks' images after a run
//! (`raid0_layout =` in a scenario): every block the kernel's verify stamped (magic
//! `BAREMQv1`, its LD sector at bytes 8..16, its size at 28..32) must sit on the arm and at
//! the offset RAID-0 striping gives that sector, and every arm must hold some. A RAID-1 LD's
//! two images (`raid1_layout =`): every stamped block sits at its LD offset on both, the two
//! copies byte for byte the same, and each image holds some. The checks know nothing of the
//! driver or the emulation: only the images and the RAID level's layout.

use std::path::Path;

/// The verify header's magic (kernel/workload's `VERIFY_MAGIC`, ASCII `BAREMQv1`).
const MAGIC: &[u8; 8] = b"BAREMQv1";
const SECTOR: u64 = 512;

/// Where RAID-0 striping puts LD byte `ld_byte`: (arm, byte on that arm).
pub fn place(ld_byte: u64, arms: u64, strip_bytes: u64) -> (u64, u64) {
    let strip = ld_byte / strip_bytes;
    (strip % arms, (strip / arms) * strip_bytes + ld_byte % strip_bytes)
}

/// Stamped blocks found on each arm, all where striping puts them; else what is misplaced.
pub fn check_images(images: &[Vec<u8>], strip_bytes: u64) -> Result<Vec<u64>, String> {
    if images.len() < 2 || strip_bytes == 0 || !strip_bytes.is_multiple_of(SECTOR) {
        return Err(format!(
            "raid0_layout: {} image(s), strip {strip_bytes} bytes: needs 2 or more images and a strip of whole sectors",
            images.len()
        ));
    }
    let arms = images.len() as u64;
    let mut found = vec![0u64; images.len()];
    let mut wrong = Vec::new();
    for (arm, image) in images.iter().enumerate() {
        for (i, sector) in image.chunks_exact(SECTOR as usize).enumerate() {
            if &sector[..8] != MAGIC {
                continue;
            }
            let ld_sector = u64::from_le_bytes(sector[8..16].try_into().expect("8 bytes"));
            let block_size = u32::from_le_bytes(sector[28..32].try_into().expect("4 bytes"));
            let at = i as u64 * SECTOR;
            let want = ld_sector.checked_mul(SECTOR).map(|b| place(b, arms, strip_bytes));
            if want != Some((arm as u64, at)) {
                wrong.push(format!(
                    "LD sector {ld_sector} (a {block_size}-byte block) found on arm {arm} at byte {at}, striping puts it {}",
                    want.map_or("nowhere (sector overflows)".to_string(), |(a, o)| format!("on arm {a} at byte {o}"))
                ));
            } else {
                found[arm] += 1;
            }
        }
    }
    verdict("raid0_layout", "misplaced block(s)", "arm", wrong, &found)?;
    Ok(found)
}

/// A layout check's verdict: the first few of the `wrong` findings (`key: N what: ...`), else
/// a `unit` (arm or image) with no stamped block, where nothing was checked.
fn verdict(key: &str, what: &str, unit: &str, mut wrong: Vec<String>, found: &[u64]) -> Result<(), String> {
    if !wrong.is_empty() {
        let n = wrong.len();
        wrong.truncate(5);
        return Err(format!("{key}: {n} {what}: {}", wrong.join("; ")));
    }
    if let Some(at) = found.iter().position(|&n| n == 0) {
        return Err(format!(
            "{key}: no stamped block on {unit} {at} (blocks per {unit} {found:?}): the job wrote nothing there to check"
        ));
    }
    Ok(())
}

/// [`check_images`] on image files.
pub fn check_files(paths: &[&Path], strip_bytes: u64) -> Result<Vec<u64>, String> {
    check_images(&read_images(paths, "raid0_layout")?, strip_bytes)
}

fn read_images(paths: &[&Path], key: &str) -> Result<Vec<Vec<u8>>, String> {
    paths
        .iter()
        .map(|p| std::fs::read(p).map_err(|e| format!("{key}: reading {}: {e}", p.display())))
        .collect()
}

/// The largest verify block the mirror check compares whole (a larger size field is no block
/// the verify writes: the stamp's own sector is compared).
const MAX_BLOCK: u64 = 1 << 20;

/// Stamped blocks found on each of a RAID-1 LD's two images, every one at its LD offset on
/// both and the same there byte for byte; else what differs or is misplaced.
pub fn check_mirror_images(images: &[Vec<u8>]) -> Result<[u64; 2], String> {
    let [a, b] = images else {
        return Err(format!("raid1_layout: {} image(s): a mirror has 2", images.len()));
    };
    let mut found = [0u64; 2];
    let mut wrong = Vec::new();
    for (arm, (image, other)) in [(a, b), (b, a)].into_iter().enumerate() {
        for (i, sector) in image.chunks_exact(SECTOR as usize).enumerate() {
            if &sector[..8] != MAGIC {
                continue;
            }
            let ld_sector = u64::from_le_bytes(sector[8..16].try_into().expect("8 bytes"));
            let block_size = u64::from(u32::from_le_bytes(sector[28..32].try_into().expect("4 bytes")));
            let at = i as u64 * SECTOR;
            if ld_sector.checked_mul(SECTOR) != Some(at) {
                wrong.push(format!(
                    "LD sector {ld_sector} found on image {arm} at byte {at}, a mirror keeps it at byte {}",
                    ld_sector.saturating_mul(SECTOR)
                ));
                continue;
            }
            let len = if block_size.is_multiple_of(SECTOR) && (SECTOR..=MAX_BLOCK).contains(&block_size) {
                block_size
            } else {
                SECTOR
            };
            let range = at as usize..(at + len).min(image.len() as u64) as usize;
            if other.get(range.clone()) != image.get(range) {
                wrong.push(format!(
                    "LD sector {ld_sector} (a {block_size}-byte block) at byte {at}: image {arm} and image {} differ",
                    1 - arm
                ));
                continue;
            }
            found[arm] += 1;
        }
    }
    verdict("raid1_layout", "block(s) not mirrored", "image", wrong, &found)?;
    Ok(found)
}

/// [`check_mirror_images`] on image files.
pub fn check_mirror_files(paths: &[&Path]) -> Result<[u64; 2], String> {
    check_mirror_images(&read_images(paths, "raid1_layout")?)
}

#[cfg(test)]
mod tests {
    use super::*;

    const STRIP: u64 = 64 * 1024;

    /// Two arms of `bytes` each, with 4 KiB blocks stamped at LD bytes `blocks` (as RAID-0
    /// puts them when `swap` is false; arm 0 and 1 exchanged when true).
    fn arms(bytes: usize, blocks: &[u64], swap: bool) -> Vec<Vec<u8>> {
        let mut a = vec![vec![0u8; bytes]; 2];
        for &b in blocks {
            let (arm, off) = place(b, 2, STRIP);
            let arm = if swap { 1 - arm } else { arm } as usize;
            let off = off as usize;
            a[arm][off..off + 8].copy_from_slice(MAGIC);
            a[arm][off + 8..off + 16].copy_from_slice(&(b / SECTOR).to_le_bytes());
            a[arm][off + 28..off + 32].copy_from_slice(&4096u32.to_le_bytes());
        }
        a
    }

    #[test]
    fn striping_places_alternate_strips_on_alternate_arms() {
        assert_eq!(place(0, 2, STRIP), (0, 0));
        assert_eq!(place(STRIP + 4096, 2, STRIP), (1, 4096));
        assert_eq!(place(2 * STRIP + 512, 2, STRIP), (0, STRIP + 512));
        assert_eq!(place(5 * STRIP, 3, STRIP), (2, STRIP));
    }

    #[test]
    fn blocks_where_striping_puts_them_pass_and_misplaced_ones_fail() {
        let blocks = [0, 4096, STRIP, STRIP + 8192, 3 * STRIP];
        assert_eq!(
            check_images(&arms(4 * STRIP as usize, &blocks, false), STRIP),
            Ok(vec![2, 3])
        );
        let e = check_images(&arms(4 * STRIP as usize, &blocks, true), STRIP).unwrap_err();
        assert!(e.contains("5 misplaced block(s)"), "{e}");
        // A whole-disk copy of the LD onto arm 0 (no striping) is caught.
        let mut flat = arms(4 * STRIP as usize, &[], false);
        flat[0][STRIP as usize..STRIP as usize + 8].copy_from_slice(MAGIC);
        flat[0][STRIP as usize + 8..STRIP as usize + 16].copy_from_slice(&(STRIP / SECTOR).to_le_bytes());
        assert!(check_images(&flat, STRIP).unwrap_err().contains("on arm 1 at byte 0"));
    }

    /// Two mirror images of `bytes` each with 4 KiB blocks stamped at LD bytes `blocks`, each
    /// filled past its header with a byte of its LD sector.
    fn mirrors(bytes: usize, blocks: &[u64]) -> Vec<Vec<u8>> {
        let mut m = vec![vec![0u8; bytes]; 2];
        for image in &mut m {
            for &b in blocks {
                let at = b as usize;
                image[at..at + 4096].fill((b / SECTOR) as u8 | 1);
                image[at..at + 8].copy_from_slice(MAGIC);
                image[at + 8..at + 16].copy_from_slice(&(b / SECTOR).to_le_bytes());
                image[at + 28..at + 32].copy_from_slice(&4096u32.to_le_bytes());
            }
        }
        m
    }

    #[test]
    fn mirrored_blocks_pass_and_a_copy_that_differs_or_moved_fails() {
        let blocks = [0, 4096, STRIP, 3 * STRIP + 8192];
        let good = mirrors(4 * STRIP as usize, &blocks);
        assert_eq!(check_mirror_images(&good), Ok([4, 4]));
        // One byte deep in a block's second copy (past the stamp's own sector).
        let mut m = good.clone();
        m[1][STRIP as usize + 3000] ^= 0xFF;
        let e = check_mirror_images(&m).unwrap_err();
        assert!(e.contains("2 block(s) not mirrored"), "{e}");
        assert!(
            e.contains(&format!("LD sector {} (a 4096-byte block)", STRIP / SECTOR)),
            "{e}"
        );
        // A block only one image holds.
        let mut m = good.clone();
        m[1][4096..8192].fill(0);
        let e = check_mirror_images(&m).unwrap_err();
        assert!(e.contains("1 block(s) not mirrored"), "{e}");
        assert!(e.contains("image 0 and image 1 differ"), "{e}");
        // Both copies moved together (striped, not mirrored): not at the LD offset.
        let mut m = good;
        for image in &mut m {
            let (src, dst) = (STRIP as usize, 2 * STRIP as usize);
            let block = image[src..src + 4096].to_vec();
            image[src..src + 4096].fill(0);
            image[dst..dst + 4096].copy_from_slice(&block);
        }
        let e = check_mirror_images(&m).unwrap_err();
        assert!(e.contains(&format!("a mirror keeps it at byte {STRIP}")), "{e}");
    }

    #[test]
    fn a_mirror_without_stamps_or_with_another_count_of_images_fails() {
        let e = check_mirror_images(&mirrors(STRIP as usize, &[])).unwrap_err();
        assert!(e.contains("no stamped block on image 0"), "{e}");
        assert!(check_mirror_images(&mirrors(STRIP as usize, &[0])[..1]).is_err());
        let mut three = mirrors(STRIP as usize, &[0]);
        three.push(three[0].clone());
        assert!(check_mirror_images(&three).is_err());
    }

    #[test]
    fn an_arm_without_stamps_or_a_bad_geometry_fails() {
        let e = check_images(&arms(4 * STRIP as usize, &[0, 4096], false), STRIP).unwrap_err();
        assert!(e.contains("no stamped block on arm 1"), "{e}");
        assert!(check_images(&[vec![0; 1024]], STRIP).is_err());
        assert!(check_images(&arms(1024, &[], false), 1000).is_err());
    }
}
