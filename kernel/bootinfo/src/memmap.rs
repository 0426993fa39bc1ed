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
    /// Exclusive end address (saturating: a bogus length cannot wrap).
    pub fn end(&self) -> u64 {
        self.start.saturating_add(self.len)
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

/// Sums a memory map.
pub fn totals(regions: &[MemoryRegion]) -> MemoryTotals {
    let mut t = MemoryTotals::default();
    for r in regions {
        match r.kind {
            MemoryKind::Usable => {
                t.usable += r.len;
                t.ram += r.len;
                t.top = t.top.max(r.end());
            }
            MemoryKind::AcpiReclaimable | MemoryKind::AcpiNvs => {
                t.ram += r.len;
                t.reserved += r.len;
            }
            _ => t.reserved += r.len,
        }
    }
    t
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
        self.end - self.start
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
        let start = r.start.next_multiple_of(PAGE);
        let end = r.end() & !(PAGE - 1);
        if start < end {
            out.push(Range { start, end }).map_err(|_| too_many())?;
        }
    }
    let holes = regions
        .iter()
        .filter(|r| r.kind != MemoryKind::Usable)
        .map(|r| Range {
            start: r.start & !(PAGE - 1),
            end: r.end().next_multiple_of(PAGE),
        })
        .chain(reserved.iter().map(|r| Range {
            start: r.start & !(PAGE - 1),
            end: r.end.next_multiple_of(PAGE),
        }));
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
