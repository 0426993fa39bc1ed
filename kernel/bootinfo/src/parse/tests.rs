extern crate std;
use super::*;
use crate::memmap::{self, Range};
use std::string::ToString;
use std::vec;
use std::vec::Vec as StdVec;

/// A fake physical address space: one buffer mapped at `base`.
struct FakeMemory {
    base: u64,
    bytes: StdVec<u8>,
}

impl FakeMemory {
    fn new(base: u64, size: usize) -> Self {
        FakeMemory {
            base,
            bytes: vec![0; size],
        }
    }
    fn put(&mut self, addr: u64, data: &[u8]) {
        let off = (addr - self.base) as usize;
        self.bytes[off..off + data.len()].copy_from_slice(data);
    }
    fn put_u32(&mut self, addr: u64, v: u32) {
        self.put(addr, &v.to_le_bytes());
    }
    fn put_u64(&mut self, addr: u64, v: u64) {
        self.put(addr, &v.to_le_bytes());
    }
}

impl PhysMemory for FakeMemory {
    fn read(&self, addr: u64, out: &mut [u8]) -> Result<(), Error> {
        let err = Error::UnreadableMemory { addr, len: out.len() };
        let off = addr.checked_sub(self.base).ok_or(err.clone())? as usize;
        let src = self
            .bytes
            .get(off..off.checked_add(out.len()).ok_or(err.clone())?)
            .ok_or(err)?;
        out.copy_from_slice(src);
        Ok(())
    }
}

const BASE: u64 = 0x10000;

/// Multiboot1 info as QEMU builds it: flags, cmdline with the image path
/// first, and an E820-style map.
fn multiboot1_fixture(cmdline: &str, entries: &[(u64, u64, u32)]) -> FakeMemory {
    let mut m = FakeMemory::new(BASE, 0x2000);
    let info = BASE;
    let cmd = BASE + 0x400;
    let map = BASE + 0x800;
    m.put_u32(
        info,
        MB1_FLAG_MEMORY | MB1_FLAG_CMDLINE | MB1_FLAG_MMAP | MB1_FLAG_LOADER_NAME,
    );
    m.put_u32(info + 4, 639);
    m.put_u32(info + 8, 255 * 1024);
    m.put_u32(info + 16, cmd as u32);
    m.put(cmd, cmdline.as_bytes());
    m.put_u32(info + 44, (entries.len() * 24) as u32);
    m.put_u32(info + 48, map as u32);
    for (i, (start, len, ty)) in entries.iter().enumerate() {
        let e = map + i as u64 * 24;
        m.put_u32(e, 20);
        m.put_u64(e + 4, *start);
        m.put_u64(e + 12, *len);
        m.put_u32(e + 20, *ty);
    }
    m.put_u32(info + 64, (BASE + 0x600) as u32);
    m.put(BASE + 0x600, b"qemu\0");
    m
}

const QEMU_256M: &[(u64, u64, u32)] = &[
    (0, 0x9fc00, 1),
    (0x9fc00, 0x400, 2),
    (0xf0000, 0x10000, 2),
    (0x100000, 0xfee0000, 1),
    (0xffe0000, 0x20000, 2),
    (0xfffc0000, 0x40000, 2),
];

#[test]
fn multiboot1_cmdline_memory_map_and_loader() {
    let m = multiboot1_fixture("/tmp/kernel log=debug test=ud2", QEMU_256M);
    let bi = parse_boot_info(&m, MULTIBOOT1_MAGIC, BASE).unwrap();
    assert_eq!(bi.protocol, Protocol::Multiboot1);
    assert_eq!(bi.cmdline.as_str(), "log=debug test=ud2");
    assert_eq!(bi.loader_name.as_str(), "qemu");
    assert_eq!(bi.memory.len(), 6);
    assert_eq!(
        bi.memory[3],
        MemoryRegion {
            start: 0x100000,
            len: 0xfee0000,
            kind: MemoryKind::Usable
        }
    );
    let t = memmap::totals(&bi.memory);
    assert_eq!(t.usable, 0x9fc00 + 0xfee0000);
    assert_eq!(t.top, 0xffe0000);
}

#[test]
fn multiboot1_entry_running_past_the_map_is_rejected() {
    let mut m = multiboot1_fixture("k", QEMU_256M);
    // Second entry claims 200 bytes: it would run past the 144-byte map.
    m.put_u32(BASE + 0x800 + 24, 200);
    let err = parse_boot_info(&m, MULTIBOOT1_MAGIC, BASE).unwrap_err();
    assert!(err.to_string().contains("runs past the map"), "{err}");
}

#[test]
fn multiboot1_map_outside_memory_is_an_error_not_a_wild_read() {
    let mut m = multiboot1_fixture("k", QEMU_256M);
    m.put_u32(BASE + 48, 0xdead_0000);
    assert!(matches!(
        parse_boot_info(&m, MULTIBOOT1_MAGIC, BASE),
        Err(Error::UnreadableMemory { .. })
    ));
}

#[test]
fn unknown_magic_is_rejected() {
    let m = FakeMemory::new(BASE, 16);
    assert_eq!(
        parse_boot_info(&m, 0x1234, BASE).unwrap_err(),
        Error::UnknownBootMagic(0x1234)
    );
}

/// Builds Multiboot2 information from (type, payload) tags.
fn multiboot2_fixture(tags: &[(u32, StdVec<u8>)], end_tag: bool) -> FakeMemory {
    let mut body = StdVec::new();
    body.extend_from_slice(&[0u8; 8]);
    for (ty, payload) in tags {
        body.extend_from_slice(&ty.to_le_bytes());
        body.extend_from_slice(&((payload.len() + 8) as u32).to_le_bytes());
        body.extend_from_slice(payload);
        while body.len() % 8 != 0 {
            body.push(0);
        }
    }
    if end_tag {
        body.extend_from_slice(&[0, 0, 0, 0, 8, 0, 0, 0]);
    }
    let total = body.len() as u32;
    body[..4].copy_from_slice(&total.to_le_bytes());
    let mut m = FakeMemory::new(BASE, body.len() + 64);
    m.put(BASE, &body);
    m
}

fn mb2_mmap(entries: &[(u64, u64, u32)]) -> StdVec<u8> {
    let mut p = StdVec::new();
    p.extend_from_slice(&24u32.to_le_bytes());
    p.extend_from_slice(&0u32.to_le_bytes());
    for (s, l, t) in entries {
        p.extend_from_slice(&s.to_le_bytes());
        p.extend_from_slice(&l.to_le_bytes());
        p.extend_from_slice(&t.to_le_bytes());
        p.extend_from_slice(&0u32.to_le_bytes());
    }
    p
}

#[test]
fn multiboot2_tags_are_parsed_and_new_rsdp_preferred() {
    let mut rsdp_v1 = b"RSD PTR ".to_vec();
    rsdp_v1.resize(20, 1);
    let mut rsdp_v2 = b"RSD PTR ".to_vec();
    rsdp_v2.resize(36, 2);
    let m = multiboot2_fixture(
        &[
            (MB2_TAG_CMDLINE, b"/boot/kernel smp=off\0".to_vec()),
            (MB2_TAG_LOADER_NAME, b"GRUB 2.06\0".to_vec()),
            (MB2_TAG_ACPI_NEW, rsdp_v2.clone()),
            (MB2_TAG_ACPI_OLD, rsdp_v1),
            (
                MB2_TAG_MMAP,
                mb2_mmap(&[(0, 0x9fc00, 1), (0x100000, 0x7ff00000, 1), (0xfec00000, 0x1000, 2)]),
            ),
            (99, vec![7; 13]),
        ],
        true,
    );
    let bi = parse_boot_info(&m, MULTIBOOT2_MAGIC, BASE).unwrap();
    assert_eq!(bi.protocol, Protocol::Multiboot2);
    assert_eq!(bi.cmdline.as_str(), "smp=off");
    assert_eq!(bi.loader_name.as_str(), "GRUB 2.06");
    assert_eq!(bi.memory.len(), 3);
    assert_eq!(bi.memory[2].kind, MemoryKind::Reserved);
    match bi.rsdp {
        Some(RsdpSource::Copy(bytes)) => assert_eq!(bytes.as_slice(), rsdp_v2.as_slice()),
        other => panic!("expected the ACPI 2.0 RSDP copy, got {other:?}"),
    }
}

#[test]
fn multiboot2_efi_system_table_is_used_only_without_an_acpi_tag() {
    let st = 0x7F9E_E018u64.to_le_bytes().to_vec();
    let mmap = (MB2_TAG_MMAP, mb2_mmap(&[(0x100000, 0x7ff00000, 1)]));
    let m = multiboot2_fixture(&[(MB2_TAG_EFI64_SYSTEM_TABLE, st.clone()), mmap.clone()], true);
    let bi = parse_boot_info(&m, MULTIBOOT2_MAGIC, BASE).unwrap();
    assert_eq!(bi.rsdp, Some(RsdpSource::EfiSystemTable(0x7F9E_E018)));
    let mut rsdp_v1 = b"RSD PTR ".to_vec();
    rsdp_v1.resize(20, 1);
    for tags in [
        vec![
            (MB2_TAG_EFI64_SYSTEM_TABLE, st.clone()),
            (MB2_TAG_ACPI_OLD, rsdp_v1.clone()),
            mmap.clone(),
        ],
        vec![
            (MB2_TAG_ACPI_OLD, rsdp_v1.clone()),
            (MB2_TAG_EFI64_SYSTEM_TABLE, st.clone()),
            mmap.clone(),
        ],
    ] {
        let m = multiboot2_fixture(&tags, true);
        let bi = parse_boot_info(&m, MULTIBOOT2_MAGIC, BASE).unwrap();
        assert!(matches!(bi.rsdp, Some(RsdpSource::Copy(_))), "{:?}", bi.rsdp);
    }
}

#[test]
fn multiboot2_without_end_tag_or_with_oversized_tag_is_rejected() {
    let m = multiboot2_fixture(&[(MB2_TAG_MMAP, mb2_mmap(&[(0, 4096, 1)]))], false);
    assert!(
        parse_boot_info(&m, MULTIBOOT2_MAGIC, BASE)
            .unwrap_err()
            .to_string()
            .contains("no end tag")
    );

    let mut m = multiboot2_fixture(&[(MB2_TAG_CMDLINE, b"x\0".to_vec())], true);
    m.put_u32(BASE + 12, 0x4000); // the cmdline tag's size now exceeds total_size
    assert!(
        parse_boot_info(&m, MULTIBOOT2_MAGIC, BASE)
            .unwrap_err()
            .to_string()
            .contains("size out of range")
    );

    let mut m = multiboot2_fixture(&[(MB2_TAG_CMDLINE, b"x\0".to_vec())], true);
    m.put_u32(BASE + 12, 0); // zero-sized tag must not loop forever
    assert!(parse_boot_info(&m, MULTIBOOT2_MAGIC, BASE).is_err());
}

#[test]
fn multiboot2_bad_mmap_entry_size_is_rejected() {
    let mut p = mb2_mmap(&[(0, 4096, 1)]);
    p[0] = 8;
    let m = multiboot2_fixture(&[(MB2_TAG_MMAP, p)], true);
    assert!(
        parse_boot_info(&m, MULTIBOOT2_MAGIC, BASE)
            .unwrap_err()
            .to_string()
            .contains("size below 24")
    );
}

#[test]
fn pvh_start_info_with_memmap() {
    let mut m = FakeMemory::new(BASE, 0x1000);
    m.put_u32(BASE, PVH_MAGIC);
    m.put_u32(BASE + 4, 1);
    m.put_u64(BASE + 24, BASE + 0x100);
    m.put(BASE + 0x100, b"log=warn\0");
    m.put_u64(BASE + 32, 0xf5a40);
    m.put_u64(BASE + 40, BASE + 0x200);
    m.put_u32(BASE + 48, 2);
    for (i, (s, l, t)) in [(0u64, 0x9fc00u64, 1u32), (0x100000, 0x1000000, 1)].iter().enumerate() {
        let e = BASE + 0x200 + i as u64 * 24;
        m.put_u64(e, *s);
        m.put_u64(e + 8, *l);
        m.put_u32(e + 16, *t);
    }
    let bi = parse_boot_info(&m, PVH_MAGIC, BASE).unwrap();
    assert_eq!(bi.cmdline.as_str(), "log=warn");
    assert_eq!(bi.rsdp, Some(RsdpSource::Address(0xf5a40)));
    assert_eq!(memmap::totals(&bi.memory).usable, 0x9fc00 + 0x1000000);

    m.put_u32(BASE, 0);
    assert!(
        parse_boot_info(&m, PVH_MAGIC, BASE)
            .unwrap_err()
            .to_string()
            .contains("bad magic")
    );
}

#[test]
fn image_path_is_stripped_only_when_it_looks_like_one() {
    assert_eq!(strip_image_path("/boot/kernel a=1 b=2"), "a=1 b=2");
    assert_eq!(strip_image_path("a=1 b=2"), "a=1 b=2");
    assert_eq!(strip_image_path("/boot/kernel"), "");
    assert_eq!(strip_image_path("  kernel   x=1"), "x=1");
    assert_eq!(strip_image_path(""), "");
}

#[test]
fn usable_ranges_carve_out_reserved_and_align() {
    let regions = [
        MemoryRegion {
            start: 0,
            len: 0x9fc00,
            kind: MemoryKind::Usable,
        },
        MemoryRegion {
            start: 0x100000,
            len: 0x7f00000,
            kind: MemoryKind::Usable,
        },
        // An overlapping reserved entry inside the usable one.
        MemoryRegion {
            start: 0x200800,
            len: 0x1000,
            kind: MemoryKind::Reserved,
        },
    ];
    let reserved = [
        Range {
            start: 0,
            end: 0x100000,
        },
        Range {
            start: 0x100000,
            end: 0x180000,
        },
    ];
    let r: heapless::Vec<Range, 16> = memmap::usable_ranges(&regions, &reserved).unwrap();
    assert_eq!(
        r.as_slice(),
        &[
            Range {
                start: 0x180000,
                end: 0x200000
            },
            Range {
                start: 0x202000,
                end: 0x8000000
            }
        ]
    );
}

#[test]
fn usable_ranges_capacity_overflow_is_an_error() {
    let regions: StdVec<MemoryRegion> = (0..8)
        .map(|i| MemoryRegion {
            start: i * 0x10000,
            len: 0x8000,
            kind: MemoryKind::Usable,
        })
        .collect();
    let r: Result<heapless::Vec<Range, 4>, _> = memmap::usable_ranges(&regions, &[]);
    assert!(matches!(r, Err(Error::TooMany { .. })));
}

/// Loader pointers near 2^64: every `pointer + offset` is checked, so a
/// structure at the top of the address space gives an error, not a wrapped
/// read of low memory (or an overflow panic in a debug build).
#[test]
fn pvh_pointers_near_2_pow_64_are_errors_not_wrapped_reads() {
    let top = 0xFFFF_FFFF_FFFF_FF00u64;
    let mut m = FakeMemory::new(top, 0x100);
    m.put_u32(top, PVH_MAGIC);
    m.put_u32(top + 4, 1);
    // Memory-map pointer 8 bytes below 2^64: the entry's length field would
    // be at 2^64 exactly.
    m.put_u64(top + 40, u64::MAX - 7);
    m.put_u32(top + 48, 1);
    let e = parse_boot_info(&m, PVH_MAGIC, top).unwrap_err();
    assert!(matches!(e, Error::UnreadableMemory { .. }), "{e:?}");

    // A command line that runs to the last byte without a NUL.
    m.put_u32(top + 48, 0);
    m.put_u64(top + 24, top + 0xF0);
    m.put(top + 0xF0, &[b'x'; 16]);
    let e = parse_boot_info(&m, PVH_MAGIC, top).unwrap_err();
    assert!(matches!(e, Error::UnreadableMemory { .. }), "{e:?}");
}

#[test]
fn multiboot_info_pointer_at_the_top_of_memory_is_an_error() {
    let top = u64::MAX - 3;
    let mut m = FakeMemory::new(top, 4);
    // Multiboot1 flags say "memory map present": the fields at +44/+48 would wrap.
    m.put_u32(top, MB1_FLAG_MMAP);
    let e = parse_boot_info(&m, MULTIBOOT1_MAGIC, top).unwrap_err();
    assert!(matches!(e, Error::UnreadableMemory { .. }), "{e:?}");
    // Multiboot2: a total size of 16 whose tags would lie past 2^64.
    m.put_u32(top, 16);
    let e = parse_boot_info(&m, MULTIBOOT2_MAGIC, top).unwrap_err();
    assert!(matches!(e, Error::UnreadableMemory { .. }), "{e:?}");
}

/// A framebuffer tag's payload (after type and size): address, pitch, width, height, bpp, type,
/// reserved, then red/green/blue position and size.
fn mb2_framebuffer(address: u64, pitch: u32, width: u32, height: u32, bpp: u8, kind: u8) -> StdVec<u8> {
    let mut p = StdVec::new();
    p.extend_from_slice(&address.to_le_bytes());
    p.extend_from_slice(&pitch.to_le_bytes());
    p.extend_from_slice(&width.to_le_bytes());
    p.extend_from_slice(&height.to_le_bytes());
    p.extend_from_slice(&[bpp, kind, 0, 0]);
    p.extend_from_slice(&[16, 8, 8, 8, 0, 8]);
    p
}

#[test]
fn multiboot2_framebuffer_is_read_and_judged() {
    let boot = |payload: StdVec<u8>| {
        let m = multiboot2_fixture(
            &[
                (MB2_TAG_MMAP, mb2_mmap(&[(0, 0x9fc00, 1)])),
                (MB2_TAG_FRAMEBUFFER, payload),
            ],
            true,
        );
        parse_boot_info(&m, MULTIBOOT2_MAGIC, BASE).unwrap().framebuffer
    };
    let fb = boot(mb2_framebuffer(0xfd00_0000, 4096, 1024, 768, 32, 1)).unwrap();
    assert_eq!(
        fb,
        Framebuffer {
            address: 0xfd00_0000,
            pitch: 4096,
            width: 1024,
            height: 768,
            bits_per_pixel: 32,
            kind: 1,
            red_shift: 16,
            green_shift: 8,
            blue_shift: 0,
            channel_bits: [8; 3],
        }
    );
    assert_eq!(fb.drawable(), Ok(()));
    // Read, but not drawable, each with its reason. None of them stops the boot.
    for (payload, why) in [
        (mb2_framebuffer(0xfd00_0000, 4096, 1024, 768, 16, 1), "24 or 32 bits"),
        (mb2_framebuffer(0xfd00_0000, 4096, 1024, 768, 32, 0), "direct colour"),
        (mb2_framebuffer(0xb8000, 160, 80, 25, 16, 2), "text mode"),
        (mb2_framebuffer(0xfd00_0000, 4000, 1024, 768, 32, 1), "pitch"),
        (mb2_framebuffer(0xfd00_0000, 4096, 0, 768, 32, 1), "width"),
        (mb2_framebuffer(0, 4096, 1024, 768, 32, 1), "address"),
        (mb2_framebuffer((1 << 52) - 4096, 4096, 1024, 768, 32, 1), "address"),
    ] {
        let fb = boot(payload).expect("read");
        assert!(fb.drawable().unwrap_err().contains(why), "{fb:?}: {:?}", fb.drawable());
    }
    // 24 bits per pixel (GRUB's VBE choice on QEMU's VGA) is drawable; its pitch may be 3 * width.
    assert_eq!(
        boot(mb2_framebuffer(0xfd00_0000, 2400, 800, 600, 24, 1))
            .unwrap()
            .drawable(),
        Ok(())
    );
    assert!(
        boot(mb2_framebuffer(0xfd00_0000, 2399, 800, 600, 24, 1))
            .unwrap()
            .drawable()
            .is_err()
    );
    let mut odd = mb2_framebuffer(0xfd00_0000, 4096, 1024, 768, 32, 1);
    odd[24..30].copy_from_slice(&[16, 5, 5, 6, 0, 5]);
    assert!(boot(odd).unwrap().drawable().unwrap_err().contains("bytes"));
    // A tag too short for the colour fields is ignored.
    assert_eq!(
        boot(mb2_framebuffer(0xfd00_0000, 4096, 1024, 768, 32, 1)[..20].to_vec()),
        None
    );
}
#[test]
fn multiboot1_modules_as_qemu_initrd_gives_them() {
    let mut m = multiboot1_fixture("/kernel log=warn", QEMU_256M);
    let flags = u32::from_le_bytes(m.bytes[0..4].try_into().unwrap());
    m.put_u32(BASE, flags | MB1_FLAG_MODULES);
    let list = BASE + 0xa00;
    m.put_u32(BASE + 20, 2);
    m.put_u32(BASE + 24, list as u32);
    for (i, (start, end, string)) in [(0x20_0000u32, 0x20_0123u32, BASE + 0xc00), (0x20_1000, 0x20_1000, 0)]
        .iter()
        .enumerate()
    {
        let e = list + i as u64 * 16;
        m.put_u32(e, *start);
        m.put_u32(e + 4, *end);
        m.put_u32(e + 8, *string as u32);
    }
    m.put(BASE + 0xc00, b"tests/fio/seq-128k.fio\0");
    let bi = parse_boot_info(&m, MULTIBOOT1_MAGIC, BASE).unwrap();
    assert_eq!(bi.modules.len(), 2);
    assert_eq!((bi.modules[0].start, bi.modules[0].end), (0x20_0000, 0x20_0123));
    assert_eq!(bi.modules[0].len(), 0x123);
    assert_eq!(bi.modules[0].string.as_str(), "tests/fio/seq-128k.fio");
    assert!(bi.modules[1].string.is_empty() && bi.modules[1].is_empty());
    // Page-rounded ranges to reserve; the empty module reserves nothing.
    let ranges: StdVec<Range> = bi.module_ranges().collect();
    assert_eq!(
        ranges,
        [Range {
            start: 0x20_0000,
            end: 0x20_1000
        }]
    );
    // A module that ends before it starts, or too many modules, is an error.
    m.put_u32(list + 4, 0x1f_0000);
    assert!(
        parse_boot_info(&m, MULTIBOOT1_MAGIC, BASE)
            .unwrap_err()
            .to_string()
            .contains("ends before")
    );
    m.put_u32(BASE + 20, 1000);
    assert!(parse_boot_info(&m, MULTIBOOT1_MAGIC, BASE).is_err());
}

#[test]
fn multiboot2_module_tags_keep_the_grub_string() {
    let mut tag = StdVec::new();
    tag.extend_from_slice(&0x30_0000u32.to_le_bytes());
    tag.extend_from_slice(&0x30_0400u32.to_le_bytes());
    tag.extend_from_slice(b"fio\0");
    let m = multiboot2_fixture(
        &[
            (MB2_TAG_MODULE, tag),
            (MB2_TAG_MMAP, mb2_mmap(&[(0, 0x9fc00, 1), (0x100000, 0x7ff00000, 1)])),
        ],
        true,
    );
    let bi = parse_boot_info(&m, MULTIBOOT2_MAGIC, BASE).unwrap();
    assert_eq!(bi.modules.len(), 1);
    assert_eq!(bi.modules[0].string.as_str(), "fio");
    assert_eq!((bi.modules[0].start, bi.modules[0].end), (0x30_0000, 0x30_0400));
    let short = multiboot2_fixture(&[(MB2_TAG_MODULE, vec![0; 4])], true);
    assert!(
        parse_boot_info(&short, MULTIBOOT2_MAGIC, BASE)
            .unwrap_err()
            .to_string()
            .contains("too short")
    );
}

#[test]
fn pvh_module_list_is_parsed_and_checked() {
    let mut m = FakeMemory::new(BASE, 0x1000);
    m.put_u32(BASE, PVH_MAGIC);
    m.put_u32(BASE + 4, 1);
    m.put_u32(BASE + 12, 1);
    m.put_u64(BASE + 16, BASE + 0x300);
    m.put_u64(BASE + 0x300, 0x40_0000);
    m.put_u64(BASE + 0x308, 300);
    m.put_u64(BASE + 0x310, BASE + 0x380);
    m.put(BASE + 0x380, b"job.fio\0");
    m.put_u64(BASE + 40, BASE + 0x200);
    m.put_u32(BASE + 48, 1);
    m.put_u64(BASE + 0x200, 0x100000);
    m.put_u64(BASE + 0x208, 0x1000000);
    m.put_u32(BASE + 0x210, 1);
    let bi = parse_boot_info(&m, PVH_MAGIC, BASE).unwrap();
    assert_eq!(bi.modules.len(), 1);
    assert_eq!((bi.modules[0].start, bi.modules[0].end), (0x40_0000, 0x40_0000 + 300));
    assert_eq!(bi.modules[0].string.as_str(), "job.fio");
    m.put_u64(BASE + 0x308, 1 << 40);
    assert!(
        parse_boot_info(&m, PVH_MAGIC, BASE)
            .unwrap_err()
            .to_string()
            .contains("16 MiB")
    );
    m.put_u64(BASE + 0x300, u64::MAX - 10);
    m.put_u64(BASE + 0x308, 100);
    assert!(parse_boot_info(&m, PVH_MAGIC, BASE).is_err());
}
