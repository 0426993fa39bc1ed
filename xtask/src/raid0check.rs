//! Where a RAID-0 LD's blocks landed, read from its member disks' images after a run
//! (`raid0_layout =` in a scenario): every block the kernel's verify stamped (magic
//! `BAREMQv1`, its LD sector at bytes 8..16, its size at 28..32) must sit on the arm and at
//! the offset RAID-0 striping gives that sector, and every arm must hold some. The check knows
//! nothing of the driver or the emulation: only the images and the striping.

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
    if !wrong.is_empty() {
        let n = wrong.len();
        wrong.truncate(5);
        return Err(format!("raid0_layout: {n} misplaced block(s): {}", wrong.join("; ")));
    }
    if let Some(arm) = found.iter().position(|&n| n == 0) {
        return Err(format!(
            "raid0_layout: no stamped block on arm {arm} (blocks per arm {found:?}): the job wrote nothing there to check"
        ));
    }
    Ok(found)
}

/// [`check_images`] on image files.
pub fn check_files(paths: &[&Path], strip_bytes: u64) -> Result<Vec<u64>, String> {
    let images = paths
        .iter()
        .map(|p| std::fs::read(p).map_err(|e| format!("raid0_layout: reading {}: {e}", p.display())))
        .collect::<Result<Vec<_>, _>>()?;
    check_images(&images, strip_bytes)
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

    #[test]
    fn an_arm_without_stamps_or_a_bad_geometry_fails() {
        let e = check_images(&arms(4 * STRIP as usize, &[0, 4096], false), STRIP).unwrap_err();
        assert!(e.contains("no stamped block on arm 1"), "{e}");
        assert!(check_images(&[vec![0; 1024]], STRIP).is_err());
        assert!(check_images(&arms(1024, &[], false), 1000).is_err());
    }
}
