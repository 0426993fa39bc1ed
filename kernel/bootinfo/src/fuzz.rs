//! Fuzz checks: one function per target, shared by the fixed-count fuzz
//! passes in `tests/fuzz.rs` and the cargo-fuzz targets in `fuzz/`
//! (`cargo xtask fuzz`). Each takes arbitrary bytes, runs a parser, and
//! panics if an invariant breaks; errors are fine (they are [`Error`]s, and
//! their `Display` is exercised). Not part of the kernel's API.

use core::fmt::{self, Write};

use crate::cmdline;
use crate::error::Error;
use crate::memmap::{self, FreeRanges, MemoryKind, MemoryRegion, PAGE, Range};
use crate::parse::{self, BootInfo, MAX_CMDLINE, PhysMemory};

/// Physical address the fuzz input is placed at; the info structure starts there.
pub const BASE: u64 = 0x1_0000;

/// The input as physical memory at [`BASE`].
struct Image<'a>(&'a [u8]);

impl PhysMemory for Image<'_> {
    fn read(&self, addr: u64, out: &mut [u8]) -> Result<(), Error> {
        let error = Error::UnreadableMemory { addr, len: out.len() };
        let start = addr.checked_sub(BASE).ok_or(error.clone())?;
        let start = usize::try_from(start).map_err(|_| error.clone())?;
        let end = start.checked_add(out.len()).ok_or(error.clone())?;
        out.copy_from_slice(self.0.get(start..end).ok_or(error)?);
        Ok(())
    }
}

/// Formats into nothing: exercises `Display` without allocating.
struct Sink;

impl Write for Sink {
    fn write_str(&mut self, _: &str) -> fmt::Result {
        Ok(())
    }
}

fn exercise_display(value: &impl fmt::Display) {
    let _ = write!(Sink, "{value}");
}

/// Multiboot1 information at [`BASE`] (pointers inside it point into the input).
pub fn multiboot1(data: &[u8]) {
    boot(data, parse::MULTIBOOT1_MAGIC);
}

/// Multiboot2 information at [`BASE`].
pub fn multiboot2(data: &[u8]) {
    boot(data, parse::MULTIBOOT2_MAGIC);
}

/// A PVH `hvm_start_info` at [`BASE`].
pub fn pvh(data: &[u8]) {
    boot(data, parse::PVH_MAGIC);
}

fn boot(data: &[u8], magic: u32) {
    match parse::parse_boot_info(&Image(data), magic, BASE) {
        Ok(info) => check_boot_info(&info),
        Err(error) => exercise_display(&error),
    }
}

fn check_boot_info(info: &BootInfo) {
    assert!(!info.memory.is_empty(), "accepted boot info without a memory map");
    assert!(info.memory.iter().all(|r| r.len > 0), "zero-length region kept");
    assert!(info.cmdline.len() <= MAX_CMDLINE);
    assert!(info.cmdline.is_ascii(), "command line is not ASCII: {:?}", info.cmdline);
    assert!(
        !info.cmdline.starts_with(char::is_whitespace),
        "command line not trimmed: {:?}",
        info.cmdline
    );
    check_memory_map(&info.memory, &[]);
    let _ = cmdline::parse(&info.cmdline, &workload::ACCEPTED_KEYS, "");
}

/// A memory map: the first byte gives 0-3 caller-reserved ranges (16 bytes
/// each: start, end), then 17-byte regions (start, length, E820 type byte).
pub fn memory_map(data: &[u8]) {
    let Some((&header, rest)) = data.split_first() else {
        return;
    };
    let reserved_count = usize::from(header % 4);
    let mut reserved = [Range { start: 0, end: 0 }; 3];
    let mut rest = rest;
    for slot in reserved.iter_mut().take(reserved_count) {
        let Some((range, tail)) = rest.split_first_chunk::<16>() else {
            return;
        };
        let (start, end) = range.split_at(8);
        *slot = Range {
            start: u64::from_le_bytes(start.try_into().unwrap_or_default()),
            end: u64::from_le_bytes(end.try_into().unwrap_or_default()),
        };
        rest = tail;
    }
    let mut regions: heapless::Vec<MemoryRegion, 64> = heapless::Vec::new();
    for chunk in rest.chunks_exact(17) {
        let (start, tail) = chunk.split_at(8);
        let (len, kind) = tail.split_at(8);
        let region = MemoryRegion {
            start: u64::from_le_bytes(start.try_into().unwrap_or_default()),
            len: u64::from_le_bytes(len.try_into().unwrap_or_default()),
            kind: MemoryKind::from_e820(u32::from(kind[0] % 9)),
        };
        if regions.push(region).is_err() {
            break;
        }
    }
    check_memory_map(&regions, &reserved[..reserved_count]);
}

/// Usable ranges are page-aligned, sorted, disjoint, inside usable regions
/// and outside every hole; totals do not wrap; the free list built from them
/// hands out aligned, non-overlapping memory inside them.
fn check_memory_map(regions: &[MemoryRegion], reserved: &[Range]) {
    let totals = memmap::totals(regions);
    match memmap::checked_totals(regions) {
        Ok(checked) => assert_eq!(checked, totals),
        Err(error) => {
            assert!(matches!(error, Error::BadStructure { what: "memory map", .. }));
            assert!(
                totals.usable == u64::MAX || totals.reserved == u64::MAX || totals.ram == u64::MAX,
                "checked totals overflowed but the saturating ones did not"
            );
        }
    }
    let usable_sum = regions
        .iter()
        .filter(|r| r.kind == MemoryKind::Usable)
        .fold(0u64, |sum, r| sum.saturating_add(r.clipped_len()));
    assert_eq!(totals.usable, usable_sum);

    let ranges: heapless::Vec<Range, 128> = match memmap::usable_ranges(regions, reserved) {
        Ok(ranges) => ranges,
        Err(error) => {
            assert!(matches!(error, Error::TooMany { .. }), "unexpected error {error:?}");
            return;
        }
    };
    for (index, range) in ranges.iter().enumerate() {
        assert!(range.start < range.end, "empty range {range:?}");
        assert!(range.start % PAGE == 0 && range.end % PAGE == 0, "unaligned {range:?}");
        if let Some(next) = ranges.get(index + 1) {
            assert!(range.end < next.start, "ranges touch or overlap: {range:?} {next:?}");
        }
        // Inside usable memory: both ends lie in (clipped) usable regions.
        let covered = |address: u64| {
            regions
                .iter()
                .any(|r| r.kind == MemoryKind::Usable && r.start <= address && address < r.end())
        };
        assert!(covered(range.start) && covered(range.end - 1), "{range:?} not usable");
        for r in regions.iter().filter(|r| r.kind != MemoryKind::Usable && r.len > 0) {
            assert!(
                r.end() <= range.start || r.start >= range.end,
                "{range:?} overlaps {r:?}"
            );
        }
        for hole in reserved.iter().filter(|hole| !hole.is_empty()) {
            assert!(
                hole.end <= range.start || hole.start >= range.end,
                "{range:?} overlaps {hole:?}"
            );
        }
    }
    let Ok(mut free) = FreeRanges::<256>::from_ranges(&ranges) else {
        panic!("disjoint page-aligned ranges refused by the free list");
    };
    let total: u64 = ranges.iter().map(Range::len).sum();
    assert_eq!(free.free_bytes(), total);
    for (bytes, align) in [(PAGE, PAGE), (3 * PAGE + 1, 4 * PAGE), (2 << 20, 2 << 20)] {
        // Every free range is page-aligned, so one free page anywhere satisfies a page.
        let page_must_fit = (bytes, align) == (PAGE, PAGE) && free.free_bytes() >= PAGE;
        let result = free.alloc(bytes, align);
        assert!(
            result.is_ok() || !page_must_fit,
            "a page refused with {} bytes free",
            free.free_bytes()
        );
        if let Ok(at) = result {
            assert_eq!(at % align, 0);
            let end = at + bytes.next_multiple_of(PAGE);
            assert!(
                ranges.iter().any(|r| r.start <= at && end <= r.end),
                "allocation outside usable memory"
            );
        }
    }
}

/// The kernel command line (the valid UTF-8 prefix of the input), with
/// the workload engine's job keys, as the kernel parses it.
pub fn command_line(data: &[u8]) {
    let text = match core::str::from_utf8(data) {
        Ok(text) => text,
        Err(error) => core::str::from_utf8(&data[..error.valid_up_to()]).unwrap_or_default(),
    };
    let stripped = parse::strip_image_path(text);
    assert!(text.ends_with(stripped), "stripping made up text");
    match cmdline::parse(text, &workload::ACCEPTED_KEYS, "") {
        Ok(config) => {
            let words: heapless::Vec<&str, 512> = text.split_whitespace().take(512).collect();
            for word in &config.job_words {
                assert!(words.contains(word), "job word {word:?} is not a word of the input");
                let key = word.split_once('=').map_or(*word, |(key, _)| key);
                assert!(
                    workload::ACCEPTED_KEYS.contains(&key),
                    "non-job key {key:?} kept as a job word"
                );
            }
            if let Some(size) = config.null_size {
                assert_eq!(size % 4096, 0);
            }
        }
        Err(error) => exercise_display(&error),
    }
}
