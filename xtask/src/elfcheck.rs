//! Sanity checks of the kernel ELF: an entry point, loadable segments, and the
//! three boot headers (Multiboot1 with the a.out kludge in the first 8 KiB,
//! Multiboot2 in the first 32 KiB, the PVH note). Catches the silent failure
//! where the boot object is not linked and lld emits an image with entry 0.

/// What the checker found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElfReport {
    pub entry: u64,
    pub loads: usize,
    pub multiboot1_offset: usize,
    pub multiboot2_offset: usize,
    pub pvh_entry: u32,
}

fn u16_at(b: &[u8], o: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(o..o + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], o: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?))
}
fn u64_at(b: &[u8], o: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?))
}

const PT_LOAD: u32 = 1;
const PT_NOTE: u32 = 4;

/// Checks `elf` and describes what it found, or says what is wrong.
pub fn check(elf: &[u8]) -> Result<ElfReport, String> {
    if elf.get(..4) != Some(b"\x7fELF") || elf.get(4) != Some(&2) {
        return Err("not an ELF64 file".into());
    }
    let short = || "truncated ELF header".to_string();
    let entry = u64_at(elf, 24).ok_or_else(short)?;
    if entry == 0 {
        return Err("entry point is 0: the boot crate was not linked (is `use boot as _;` in main.rs?)".into());
    }
    let phoff = u64_at(elf, 32).ok_or_else(short)? as usize;
    let phentsize = u16_at(elf, 54).ok_or_else(short)? as usize;
    let phnum = u16_at(elf, 56).ok_or_else(short)? as usize;
    let mut loads = 0;
    let mut pvh_entry = None;
    for i in 0..phnum {
        let ph = phoff + i * phentsize;
        let kind = u32_at(elf, ph).ok_or("program header table runs past the file")?;
        if kind == PT_LOAD {
            loads += 1;
        }
        if kind == PT_NOTE {
            let off = u64_at(elf, ph + 8).ok_or("bad note header")? as usize;
            let size = u64_at(elf, ph + 32).ok_or("bad note header")? as usize;
            pvh_entry = pvh_entry.or(find_pvh_note(
                elf.get(off..off + size).ok_or("note runs past the file")?,
            ));
        }
    }
    if loads == 0 {
        return Err("no PT_LOAD segment".into());
    }
    let multiboot1_offset =
        find_multiboot1(elf).ok_or("no valid Multiboot1 header (with a.out kludge) in the first 8 KiB")?;
    let multiboot2_offset = find_multiboot2(elf).ok_or("no valid Multiboot2 header in the first 32 KiB")?;
    let pvh_entry = pvh_entry.ok_or("no Xen PVH entry note (type 18)")?;
    Ok(ElfReport {
        entry,
        loads,
        multiboot1_offset,
        multiboot2_offset,
        pvh_entry,
    })
}

fn find_multiboot1(elf: &[u8]) -> Option<usize> {
    (0..8192.min(elf.len()).saturating_sub(12)).step_by(4).find(|&o| {
        let (Some(magic), Some(flags), Some(sum)) = (u32_at(elf, o), u32_at(elf, o + 4), u32_at(elf, o + 8)) else {
            return false;
        };
        magic == 0x1BAD_B002 && magic.wrapping_add(flags).wrapping_add(sum) == 0 && flags & (1 << 16) != 0
    })
}

fn find_multiboot2(elf: &[u8]) -> Option<usize> {
    (0..32768.min(elf.len()).saturating_sub(16)).step_by(8).find(|&o| {
        let words: Option<Vec<u32>> = (0..4).map(|i| u32_at(elf, o + 4 * i)).collect();
        let Some(w) = words else { return false };
        w[0] == 0xE852_50D6 && w.iter().fold(0u32, |a, x| a.wrapping_add(*x)) == 0
    })
}

fn find_pvh_note(notes: &[u8]) -> Option<u32> {
    let mut o = 0;
    while o + 12 <= notes.len() {
        let namesz = u32_at(notes, o)? as usize;
        let descsz = u32_at(notes, o + 4)? as usize;
        let kind = u32_at(notes, o + 8)?;
        let name_at = o + 12;
        let desc_at = name_at + namesz.next_multiple_of(4);
        if kind == 18 && notes.get(name_at..name_at + namesz)? == b"Xen\0" && descsz >= 4 {
            return u32_at(notes, desc_at);
        }
        o = desc_at + descsz.next_multiple_of(4);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal ELF64 with one PT_LOAD, one PT_NOTE and the headers at given offsets.
    fn fake_elf(entry: u64, mb1: bool, mb2: bool, pvh: bool) -> Vec<u8> {
        let mut f = vec![0u8; 0x3000];
        f[..4].copy_from_slice(b"\x7fELF");
        f[4] = 2;
        f[24..32].copy_from_slice(&entry.to_le_bytes());
        f[32..40].copy_from_slice(&64u64.to_le_bytes());
        f[54..56].copy_from_slice(&56u16.to_le_bytes());
        f[56..58].copy_from_slice(&2u16.to_le_bytes());
        f[64..68].copy_from_slice(&PT_LOAD.to_le_bytes());
        let note = 120;
        f[note..note + 4].copy_from_slice(&PT_NOTE.to_le_bytes());
        f[note + 8..note + 16].copy_from_slice(&0x2000u64.to_le_bytes());
        f[note + 32..note + 40].copy_from_slice(&20u64.to_le_bytes());
        if pvh {
            let n = 0x2000;
            f[n..n + 4].copy_from_slice(&4u32.to_le_bytes());
            f[n + 4..n + 8].copy_from_slice(&4u32.to_le_bytes());
            f[n + 8..n + 12].copy_from_slice(&18u32.to_le_bytes());
            f[n + 12..n + 16].copy_from_slice(b"Xen\0");
            f[n + 16..n + 20].copy_from_slice(&0x100042u32.to_le_bytes());
        }
        if mb1 {
            let flags = 0x0001_0003u32;
            let w = [0x1BAD_B002u32, flags, 0u32.wrapping_sub(0x1BAD_B002 + flags)];
            for (i, x) in w.iter().enumerate() {
                f[0x1000 + 4 * i..0x1004 + 4 * i].copy_from_slice(&x.to_le_bytes());
            }
        }
        if mb2 {
            let w = [0xE852_50D6u32, 0, 24, 0u32.wrapping_sub(0xE852_50D6 + 24)];
            for (i, x) in w.iter().enumerate() {
                f[0x1020 + 4 * i..0x1024 + 4 * i].copy_from_slice(&x.to_le_bytes());
            }
        }
        f
    }

    #[test]
    fn accepts_a_complete_image() {
        let r = check(&fake_elf(0x100042, true, true, true)).unwrap();
        assert_eq!(
            (r.multiboot1_offset, r.multiboot2_offset, r.pvh_entry, r.loads),
            (0x1000, 0x1020, 0x100042, 1)
        );
    }

    #[test]
    fn rejects_what_qemu_or_grub_would_reject() {
        assert!(
            check(&fake_elf(0, true, true, true))
                .unwrap_err()
                .contains("entry point is 0")
        );
        assert!(
            check(&fake_elf(1, false, true, true))
                .unwrap_err()
                .contains("Multiboot1")
        );
        assert!(
            check(&fake_elf(1, true, false, true))
                .unwrap_err()
                .contains("Multiboot2")
        );
        assert!(check(&fake_elf(1, true, true, false)).unwrap_err().contains("PVH"));
        assert!(check(b"\x7fELF\x01").unwrap_err().contains("ELF64"));
        let mut bad_sum = fake_elf(1, true, true, true);
        bad_sum[0x1008] ^= 1;
        assert!(check(&bad_sum).unwrap_err().contains("Multiboot1"));
    }
}
