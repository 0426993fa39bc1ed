//! Firmware memory maps: region kinds, totals, and the page-aligned usable
//! ranges a frame allocator may hand out.

use crate::error::Error;
use heapless::Vec;

/// Page size the usable ranges are aligned to.
pub const PAGE: u64 = 4096;

/// What a memory-map region holds (E820 types).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryKind {
    Usable,
    Reserved,
    AcpiReclaimable,
    AcpiNvs,
    Defective,
    Persistent,
    Other(u32),
}

impl MemoryKind {
    /// Maps an E820 / Multiboot type number.
    pub fn from_e820(ty: u32) -> Self {
        match ty {
            1 => MemoryKind::Usable,
            2 => MemoryKind::Reserved,
            3 => MemoryKind::AcpiReclaimable,
            4 => MemoryKind::AcpiNvs,
            5 => MemoryKind::Defective,
            7 => MemoryKind::Persistent,
            other => MemoryKind::Other(other),
        }
    }

    /// Short name for reports.
    pub fn name(self) -> &'static str {
        match self {
            MemoryKind::Usable => "usable",
            MemoryKind::Reserved => "reserved",
            MemoryKind::AcpiReclaimable => "acpi-reclaimable",
            MemoryKind::AcpiNvs => "acpi-nvs",
            MemoryKind::Defective => "defective",
            MemoryKind::Persistent => "persistent",
            MemoryKind::Other(_) => "other",
        }
    }
}

/// One firmware memory-map entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryRegion {
    pub start: u64,
    pub len: u64,
    pub kind: MemoryKind,
}

impl MemoryRegion {
    /// Exclusive end address, clipped at `u64::MAX`: an entry that claims
    /// to run past 2^64 is cut at the top of the address space, never wrapped
    /// (the last byte below 2^64 is never usable: usable ranges end on a page).
    pub fn end(&self) -> u64 {
        self.start.saturating_add(self.len)
    }

    /// Length after clipping at the top of the address space.
    pub fn clipped_len(&self) -> u64 {
        self.end() - self.start
    }
}

/// Totals for the platform report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryTotals {
    /// Bytes the firmware marks usable.
    pub usable: u64,
    /// Bytes in every other kind of region.
    pub reserved: u64,
    /// Usable plus ACPI (reclaimable and NVS): the RAM the machine was
    /// given, minus the legacy holes and firmware-reserved pages.
    pub ram: u64,
    /// Highest usable address (exclusive).
    pub top: u64,
}

/// Sums a memory map. Sums saturate at `u64::MAX`: only a bogus map (entries
/// of length near 2^64, or overlapping huge ones) gets there, and a saturated
/// figure cannot wrap to a small, plausible one. [`checked_totals`] turns
/// that case into an error instead. Lengths are clipped at the top of the
/// address space (see [`MemoryRegion::end`]).
pub fn totals(regions: &[MemoryRegion]) -> MemoryTotals {
    let mut t = MemoryTotals::default();
    for r in regions {
        let len = r.clipped_len();
        match r.kind {
            MemoryKind::Usable => {
                t.usable = t.usable.saturating_add(len);
                t.ram = t.ram.saturating_add(len);
                t.top = t.top.max(r.end());
            }
            MemoryKind::AcpiReclaimable | MemoryKind::AcpiNvs => {
                t.ram = t.ram.saturating_add(len);
                t.reserved = t.reserved.saturating_add(len);
            }
            _ => t.reserved = t.reserved.saturating_add(len),
        }
    }
    t
}

/// [`totals`], but a sum that does not fit in 64 bits is an error naming
/// the region whose length overflowed it.
pub fn checked_totals(regions: &[MemoryRegion]) -> Result<MemoryTotals, Error> {
    let mut usable = 0u64;
    let mut ram = 0u64;
    let mut reserved = 0u64;
    for r in regions {
        let len = r.clipped_len();
        let overflow = || Error::BadStructure {
            what: "memory map",
            detail: "region sizes sum past 2^64 (bogus lengths)",
            value: r.len,
        };
        match r.kind {
            MemoryKind::Usable => {
                usable = usable.checked_add(len).ok_or_else(overflow)?;
                ram = ram.checked_add(len).ok_or_else(overflow)?;
            }
            MemoryKind::AcpiReclaimable | MemoryKind::AcpiNvs => {
                ram = ram.checked_add(len).ok_or_else(overflow)?;
                reserved = reserved.checked_add(len).ok_or_else(overflow)?;
            }
            _ => reserved = reserved.checked_add(len).ok_or_else(overflow)?,
        }
    }
    Ok(totals(regions))
}

/// A half-open physical range `[start, end)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    pub start: u64,
    pub end: u64,
}

impl Range {
    /// Length in bytes.
    pub fn len(&self) -> u64 {
        self.end.saturating_sub(self.start)
    }

    /// True for an empty range.
    pub fn is_empty(&self) -> bool {
        self.end <= self.start
    }
}

/// Page-aligned usable ranges: usable regions minus any overlapping
/// non-usable region (firmware maps may overlap; reserved wins) and minus the
/// caller's `reserved` ranges (kernel image, low memory, loader data), sorted.
pub fn usable_ranges<const N: usize>(regions: &[MemoryRegion], reserved: &[Range]) -> Result<Vec<Range, N>, Error> {
    let mut out: Vec<Range, N> = Vec::new();
    let too_many = || Error::TooMany {
        what: "usable memory ranges",
        capacity: N,
    };
    for r in regions.iter().filter(|r| r.kind == MemoryKind::Usable) {
        // Usable memory shrinks to whole pages: the start rounds up (an entry
        // starting in the top page has none), the clipped end rounds down.
        let Some(start) = r.start.checked_next_multiple_of(PAGE) else {
            continue;
        };
        let end = r.end() & !(PAGE - 1);
        if start < end {
            out.push(Range { start, end }).map_err(|_| too_many())?;
        }
    }
    let holes = regions
        .iter()
        .filter(|r| r.kind != MemoryKind::Usable)
        .map(|r| hole(r.start, r.end()))
        .chain(reserved.iter().map(|r| hole(r.start, r.end)));
    for hole in holes {
        let mut i = 0;
        while i < out.len() {
            let cur = out[i];
            if hole.end <= cur.start || hole.start >= cur.end {
                i += 1;
                continue;
            }
            let left = Range {
                start: cur.start,
                end: hole.start.max(cur.start),
            };
            let right = Range {
                start: hole.end.min(cur.end),
                end: cur.end,
            };
            match (left.is_empty(), right.is_empty()) {
                (true, true) => {
                    out.swap_remove(i);
                    continue;
                }
                (false, true) => out[i] = left,
                (true, false) => out[i] = right,
                (false, false) => {
                    out[i] = left;
                    out.push(right).map_err(|_| too_many())?;
                }
            }
            i += 1;
        }
    }
    out.sort_unstable_by_key(|r| r.start);
    // Merge ranges that touch (adjacent usable entries in the firmware map).
    let mut merged: Vec<Range, N> = Vec::new();
    for r in out {
        match merged.last_mut() {
            Some(last) if last.end >= r.start => last.end = last.end.max(r.end),
            _ => merged.push(r).map_err(|_| too_many())?,
        }
    }
    Ok(merged)
}

/// A hole widened to whole pages; one that reaches the top page runs to
/// `u64::MAX` (holes may only grow, so rounding can never wrap to 0).
fn hole(start: u64, end: u64) -> Range {
    Range {
        start: start & !(PAGE - 1),
        end: end.checked_next_multiple_of(PAGE).unwrap_or(u64::MAX),
    }
}

/// Where `bytes` at `align` fit inside both the free range `free` and the
/// window `window`, as `(start, end)`, lowest first; `None` when they do not.
fn fit_in(free: Range, window: &core::ops::Range<u64>, bytes: u64, align: u64) -> Option<(u64, u64)> {
    let lo = free.start.max(window.start);
    let hi = free.end.min(window.end);
    let start = lo.checked_next_multiple_of(align)?;
    let end = start.checked_add(bytes)?;
    (end <= hi).then_some((start, end))
}

/// A first-fit allocator of physically contiguous, page-granular ranges:
/// the free list behind the kernel's frame allocator (the kernel wraps it in
/// a lock). Allocation splits a free range; freeing re-inserts in address
/// order and merges neighbours. Double frees and overlaps are refused.
#[derive(Debug, Clone, Default)]
pub struct FreeRanges<const N: usize> {
    ranges: Vec<Range, N>,
}

impl<const N: usize> FreeRanges<N> {
    /// An empty free list (a `const fn`, usable in a static).
    pub const fn new() -> Self {
        FreeRanges { ranges: Vec::new() }
    }

    /// Starts from `ranges` (page-aligned, sorted, disjoint, e.g. from [`usable_ranges`]).
    pub fn from_ranges(ranges: &[Range]) -> Result<Self, Error> {
        let mut f = Self::new();
        for r in ranges.iter().filter(|r| !r.is_empty()) {
            f.free(r.start, r.len())?;
        }
        Ok(f)
    }

    /// Bytes free.
    pub fn free_bytes(&self) -> u64 {
        self.ranges.iter().map(|r| r.len()).sum()
    }

    /// The free ranges, in address order.
    pub fn ranges(&self) -> &[Range] {
        &self.ranges
    }

    /// Takes `bytes` (rounded up to pages, at least one page) aligned to
    /// `align` (a power of two; at least a page). Returns the start address.
    pub fn alloc(&mut self, bytes: u64, align: u64) -> Result<u64, Error> {
        self.alloc_within(bytes, align, None)
    }

    /// Like [`alloc`](Self::alloc), but the allocation must lie wholly inside
    /// one of `windows` (e.g. one NUMA node's memory ranges) when they are
    /// given; still the lowest fit. Fails as "no free range" when no window
    /// has room: the caller decides whether to fall back to any memory.
    pub fn alloc_within(
        &mut self,
        bytes: u64,
        align: u64,
        windows: Option<&[core::ops::Range<u64>]>,
    ) -> Result<u64, Error> {
        if align == 0 || !align.is_power_of_two() {
            return Err(Error::BadStructure {
                what: "allocation",
                detail: "alignment is not a power of two",
                value: align,
            });
        }
        let align = align.max(PAGE);
        let bytes = bytes.max(1).checked_next_multiple_of(PAGE).ok_or(Error::BadStructure {
            what: "allocation",
            detail: "size overflows",
            value: bytes,
        })?;
        let whole = core::slice::from_ref(&(0..u64::MAX));
        let windows = windows.unwrap_or(whole);
        for i in 0..self.ranges.len() {
            let r = self.ranges[i];
            let Some((start, end)) = windows.iter().filter_map(|w| fit_in(r, w, bytes, align)).min() else {
                continue;
            };
            let before = Range {
                start: r.start,
                end: start,
            };
            let after = Range { start: end, end: r.end };
            match (before.is_empty(), after.is_empty()) {
                (true, true) => {
                    self.ranges.remove(i);
                }
                (true, false) => self.ranges[i] = after,
                (false, true) => self.ranges[i] = before,
                (false, false) => {
                    self.ranges.insert(i + 1, after).map_err(|_| Error::TooMany {
                        what: "free memory ranges",
                        capacity: N,
                    })?;
                    self.ranges[i] = before;
                }
            }
            return Ok(start);
        }
        Err(Error::BadStructure {
            what: "allocation",
            detail: "no free range is large enough",
            value: bytes,
        })
    }

    /// Returns `[start, start + bytes)` (rounded up to pages). Refuses a range
    /// that overlaps free memory (a double free).
    pub fn free(&mut self, start: u64, bytes: u64) -> Result<(), Error> {
        let end = bytes
            .max(1)
            .checked_next_multiple_of(PAGE)
            .and_then(|bytes| start.checked_add(bytes))
            .ok_or(Error::BadStructure {
                what: "free",
                detail: "range overflows",
                value: start,
            })?;
        if !start.is_multiple_of(PAGE) {
            return Err(Error::BadStructure {
                what: "free",
                detail: "start is not page-aligned",
                value: start,
            });
        }
        let pos = self
            .ranges
            .iter()
            .position(|r| r.start >= start)
            .unwrap_or(self.ranges.len());
        let overlaps_prev = pos > 0 && self.ranges[pos - 1].end > start;
        let overlaps_next = pos < self.ranges.len() && self.ranges[pos].start < end;
        if overlaps_prev || overlaps_next {
            return Err(Error::BadStructure {
                what: "free",
                detail: "range is already free (double free)",
                value: start,
            });
        }
        let merge_prev = pos > 0 && self.ranges[pos - 1].end == start;
        let merge_next = pos < self.ranges.len() && self.ranges[pos].start == end;
        match (merge_prev, merge_next) {
            (true, true) => {
                self.ranges[pos - 1].end = self.ranges[pos].end;
                self.ranges.remove(pos);
            }
            (true, false) => self.ranges[pos - 1].end = end,
            (false, true) => self.ranges[pos].start = start,
            (false, false) => self
                .ranges
                .insert(pos, Range { start, end })
                .map_err(|_| Error::TooMany {
                    what: "free memory ranges",
                    capacity: N,
                })?,
        }
        Ok(())
    }
}

#[cfg(test)]
mod free_ranges_tests {
    use super::*;

    extern crate std;
    use std::string::ToString;

    fn ranges<const N: usize>(f: &FreeRanges<N>) -> std::vec::Vec<(u64, u64)> {
        f.ranges().iter().map(|r| (r.start, r.end)).collect()
    }

    #[test]
    fn alloc_splits_and_free_merges_back() {
        let mut f: FreeRanges<8> = FreeRanges::from_ranges(&[Range {
            start: 0x10_0000,
            end: 0x80_0000,
        }])
        .unwrap();
        let total = f.free_bytes();
        let a = f.alloc(0x1000, 0x1000).unwrap();
        assert_eq!(a, 0x10_0000);
        let b = f.alloc(0x1800, 0x20_0000).unwrap();
        assert_eq!(b, 0x20_0000, "2 MiB alignment");
        assert_eq!(
            ranges(&f),
            [(0x10_1000, 0x20_0000), (0x20_2000, 0x80_0000)],
            "sizes round up to pages"
        );
        f.free(b, 0x1800).unwrap();
        f.free(a, 0x1000).unwrap();
        assert_eq!(ranges(&f), [(0x10_0000, 0x80_0000)]);
        assert_eq!(f.free_bytes(), total);
    }

    #[test]
    #[allow(clippy::single_range_in_vec_init)] // one-range windows (a node with one range) are the point
    fn alloc_within_stays_inside_the_windows() {
        // Two "nodes": 1..8 MiB and 8..16 MiB; the free list spans both.
        let mut f: FreeRanges<8> = FreeRanges::from_ranges(&[Range {
            start: 0x10_0000,
            end: 0x100_0000,
        }])
        .unwrap();
        let node1 = [0x80_0000..0x100_0000];
        let a = f.alloc_within(0x2000, 0x1000, Some(&node1)).unwrap();
        assert_eq!(a, 0x80_0000, "lowest fit inside the window, not the lowest free page");
        assert_eq!(ranges(&f), [(0x10_0000, 0x80_0000), (0x80_2000, 0x100_0000)]);
        // Alignment applies inside the window too.
        let b = f.alloc_within(0x1000, 0x20_0000, Some(&node1)).unwrap();
        assert_eq!(b, 0xA0_0000);
        // An allocation may not straddle a window's end, even where free memory continues.
        let mut g: FreeRanges<8> = FreeRanges::from_ranges(&[Range {
            start: 0x10_0000,
            end: 0x100_0000,
        }])
        .unwrap();
        let low = [0x10_0000..0x80_0000];
        assert_eq!(g.alloc_within(0x6F_0000, 0x1000, Some(&low)), Ok(0x10_0000));
        assert!(
            g.alloc_within(0x2_0000, 0x1000, Some(&low)).is_err(),
            "0x10000 bytes left in the window; 0x20000 must not spill into the next node"
        );
        assert_eq!(
            g.alloc(0x2_0000, 0x1000),
            Ok(0x7F_0000),
            "without windows it may straddle"
        );
        // Several windows (a node with two ranges): the lowest fit over all of them.
        let mut h: FreeRanges<8> = FreeRanges::from_ranges(&[Range {
            start: 0x10_0000,
            end: 0x100_0000,
        }])
        .unwrap();
        let split = [0xC0_0000..0x100_0000, 0x20_0000..0x21_0000];
        assert_eq!(h.alloc_within(0x1_0000, 0x1000, Some(&split)), Ok(0x20_0000));
        assert_eq!(h.alloc_within(0x1_0000, 0x1000, Some(&split)), Ok(0xC0_0000));
        // An empty window list has no room.
        assert!(h.alloc_within(0x1000, 0x1000, Some(&[])).is_err());
    }

    #[test]
    fn double_free_exhaustion_and_bad_alignment_are_errors() {
        let mut f: FreeRanges<4> = FreeRanges::from_ranges(&[Range {
            start: 0x1000,
            end: 0x5000,
        }])
        .unwrap();
        let a = f.alloc(0x1000, 0x1000).unwrap();
        f.free(a, 0x1000).unwrap();
        assert!(f.free(a, 0x1000).unwrap_err().to_string().contains("double free"));
        assert!(
            f.alloc(0x10000, 0x1000)
                .unwrap_err()
                .to_string()
                .contains("no free range")
        );
        assert!(f.alloc(0x1000, 3).is_err());
        assert!(f.free(0x1234, 0x1000).is_err());
        assert!(f.alloc(u64::MAX, 0x1000).is_err());
    }

    #[test]
    fn capacity_overflow_is_an_error_not_a_loss() {
        let mut f: FreeRanges<2> = FreeRanges::new();
        f.free(0x1000, 0x1000).unwrap();
        f.free(0x3000, 0x1000).unwrap();
        let e = f.free(0x5000, 0x1000).unwrap_err();
        assert!(matches!(e, Error::TooMany { .. }));
        assert_eq!(f.free_bytes(), 0x2000, "nothing changed");
    }

    #[test]
    fn random_alloc_free_sequences_keep_the_books_balanced() {
        let mut f: FreeRanges<2048> = FreeRanges::from_ranges(&[Range {
            start: 0,
            end: 64 << 20,
        }])
        .unwrap();
        let total = f.free_bytes();
        let mut held: std::vec::Vec<(u64, u64)> = std::vec::Vec::new();
        let mut x: u64 = 0x1234_5678;
        for _ in 0..2000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if !x.is_multiple_of(3) || held.is_empty() {
                let bytes = ((x >> 8) % 64 + 1) * PAGE;
                let align = PAGE << ((x >> 20) % 4);
                if let Ok(a) = f.alloc(bytes, align) {
                    assert_eq!(a % align, 0);
                    assert!(
                        held.iter().all(|&(s, b)| a + bytes <= s || s + b <= a),
                        "overlapping allocations"
                    );
                    held.push((a, bytes));
                }
            } else {
                let (a, b) = held.swap_remove((x as usize >> 4) % held.len());
                f.free(a, b).unwrap();
            }
            let held_bytes: u64 = held.iter().map(|&(_, b)| b).sum();
            assert_eq!(f.free_bytes() + held_bytes, total);
        }
    }
}

/// Memory maps with entries at the top of the 64-bit address space, where
/// an unchecked end wraps past 2^64.
#[cfg(test)]
mod near_2_pow_64_tests {
    use super::*;

    extern crate std;

    fn region(start: u64, len: u64, kind: MemoryKind) -> MemoryRegion {
        MemoryRegion { start, len, kind }
    }

    /// A typical low map: usable below 640 KiB and from 1 MiB to 2 GiB.
    fn base_map() -> std::vec::Vec<MemoryRegion> {
        std::vec![
            region(0, 0x9_F000, MemoryKind::Usable),
            region(0x10_0000, 0x7FF0_0000, MemoryKind::Usable),
            region(0xFEC0_0000, 0x40_0000, MemoryKind::Reserved),
        ]
    }

    fn usable(regions: &[MemoryRegion]) -> std::vec::Vec<(u64, u64)> {
        let ranges: Vec<Range, 16> = usable_ranges(regions, &[]).unwrap();
        ranges.iter().map(|r| (r.start, r.end)).collect()
    }

    #[test]
    fn usable_entry_crossing_2_pow_64_adds_no_pages_and_does_not_widen() {
        let mut map = base_map();
        map.push(region(0xFFFF_FFFF_FFFF_F001, 0x1000, MemoryKind::Usable));
        // The entry is clipped at the top of the address space; what is left
        // ([..F001, 2^64)) holds no whole page, so it adds nothing.
        assert_eq!(usable(&map), [(0, 0x9_F000), (0x10_0000, 0x8000_0000)]);
    }

    #[test]
    fn reserved_entry_ending_at_2_pow_64_stays_a_hole() {
        let mut map = base_map();
        map.push(region(0xFFFF_FFFF_0000_0000, 0x1_0000_0000, MemoryKind::Reserved));
        map.push(region(0x1_0000_0000, 0x1000_0000, MemoryKind::Usable));
        assert_eq!(
            usable(&map),
            [(0, 0x9_F000), (0x10_0000, 0x8000_0000), (0x1_0000_0000, 0x1_1000_0000)]
        );
        // The same reserved entry over usable memory carves it out to the top.
        map.push(region(
            0xFFFF_FFFE_0000_0000,
            0x2_0000_0000 - 0x1000,
            MemoryKind::Usable,
        ));
        assert_eq!(
            usable(&map),
            [
                (0, 0x9_F000),
                (0x10_0000, 0x8000_0000),
                (0x1_0000_0000, 0x1_1000_0000),
                (0xFFFF_FFFE_0000_0000, 0xFFFF_FFFF_0000_0000)
            ]
        );
    }

    #[test]
    fn usable_lengths_of_u64_max_and_2_do_not_overflow_the_totals() {
        let map = [
            region(0, u64::MAX, MemoryKind::Usable),
            region(0x1000, 2, MemoryKind::Usable),
        ];
        // Saturating totals: a bogus map cannot wrap to a small number.
        let t = totals(&map);
        assert_eq!(t.usable, u64::MAX);
        assert_eq!(t.ram, u64::MAX);
        assert_eq!(t.top, u64::MAX);
        // The checked form names the problem.
        let e = checked_totals(&map).unwrap_err();
        assert!(matches!(e, Error::BadStructure { what: "memory map", .. }), "{e:?}");
        // The usable ranges stay inside the address space, page-aligned.
        assert_eq!(usable(&map), [(0, 0xFFFF_FFFF_FFFF_F000)]);
    }

    #[test]
    fn caller_reserved_range_ending_at_u64_max_is_rounded_without_overflow() {
        let map = [region(0, 0x10_0000, MemoryKind::Usable)];
        let reserved = [Range {
            start: 0x8_0000,
            end: u64::MAX,
        }];
        let r: Vec<Range, 4> = usable_ranges(&map, &reserved).unwrap();
        assert_eq!(
            r.as_slice(),
            [Range {
                start: 0,
                end: 0x8_0000
            }]
        );
    }

    #[test]
    fn free_with_a_length_that_rounds_past_2_pow_64_is_an_error() {
        let mut f: FreeRanges<4> = FreeRanges::new();
        assert!(f.free(0, u64::MAX).is_err());
        assert!(f.free(0x1000, u64::MAX - 0x800).is_err());
        assert_eq!(f.free_bytes(), 0);
    }

    #[test]
    fn range_len_of_a_reversed_range_is_zero() {
        let r = Range { start: 10, end: 5 };
        assert_eq!(r.len(), 0);
        assert!(r.is_empty());
    }
}
